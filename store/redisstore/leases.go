package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// Leases returns the store's lease.Store view.
func (s *Store) Leases() lease.Store { return leases{s} }

// ReleasePath reports how releases compare and delete: ReleaseDelex
// ("delex", DELEX key IFEQ token, when every node has it) or ReleaseLua
// ("lua", the compare-and-delete script). It runs the server check first if
// needed.
func (s *Store) ReleasePath(ctx context.Context) (string, error) {
	if err := s.ready(ctx); err != nil {
		return "", err
	}
	if s.delex.Load() {
		return ReleaseDelex, nil
	}
	return ReleaseLua, nil
}

type leases struct{ s *Store }

// The lease view keeps holder descriptions and lists its keys.
var (
	_ leasedriver.HolderAcquirer = leases{}
	_ lease.Lister               = leases{}
	_ leasedriver.Queuer         = leases{}
	_ leasedriver.Waker          = leases{}
	_ leasedriver.Handover       = leases{}
)

func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire that keeps holder with the grant
// (leasedriver.HolderAcquirer), in the same script: a holder key under the
// lease's hash tag, with the lock's TTL, that names the grant's fence. A
// grant without a description writes nothing more than a plain Acquire.
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	return v.acquire(ctx, key, token, ttl, holder, 0, 0)
}

// AcquireQueued is AcquireHolder for a waiter that keeps its place in
// the key's queue for stay (leasedriver.Queuer): two sorted sets under
// the lease's hash tag, read and written by the acquire script.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	if err := leasedriver.ValidateStay(stay); err != nil {
		return lease.Grant{}, err
	}
	return v.acquire(ctx, key, token, ttl, holder, stay, 0)
}

// AcquireHandover is AcquireQueued for a waiter that watches key
// (leasedriver.Handover). While this store is subscribed to the key's
// hand-over channel (Watch subscribes to it), the waiter's place carries
// its attempt, the end of the grant that attempt asks for, its holder and
// that channel, in a hash next to the queue. A release that finds the
// waiter first hands the key to it in the release script, if the channel
// still has a subscriber: a process that ended has none, and its waiter is
// woken instead. (A machine that vanished without closing its connection
// keeps its subscription until the server drops the connection, and its
// waiter may be handed the key within its stay, which then waits for the
// grant's TTL.) The release hands a key over only where it waits for no
// replica (no replica connected, or Replication.Off): a grant must not
// reach its waiter before the replicas have it, and with replicas the
// waiter takes the key with an acquire of its own, confirmed as every
// grant is.
func (v leases) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	if err := leasedriver.ValidateStay(stay); err != nil {
		return lease.Grant{}, err
	}
	if attempt == 0 {
		return lease.Grant{}, fmt.Errorf("%w: hand-over attempt 0 (they are numbered from 1)", lease.ErrInvalid)
	}
	return v.acquire(ctx, key, token, ttl, holder, stay, attempt)
}

// acquire runs the acquire script; stay 0 is a plain acquire, which does
// not queue, and attempt not 0 a hand-over's (when this store listens for
// the key's hand-overs).
func (v leases) acquire(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return lease.Grant{}, err
	}
	k := s.allKeys(key)
	_, ms := s.ttlArg(ttl)
	stayMS := strconv.FormatInt(max(stay.Milliseconds(), 0), 10)
	if stay > 0 && stay < time.Millisecond {
		stayMS = "1"
	}
	cn, need, err := s.confirming(ctx, k.lock, false)
	if err != nil {
		return lease.Grant{}, s.fail(err)
	}
	// A place takes a hand-over only while this store listens for the
	// key's and waits for no replica: a grant handed over is not
	// confirmed, so a store that confirms its grants takes none.
	at, grantCh := "0", ""
	if attempt != 0 && need == 0 && s.wakes.subscribed(k.wake) {
		at, grantCh = strconv.FormatUint(attempt, 10), s.grantChannel(k.wake)
	}
	res, p := s.writeAt(ctx, cn, need, acquireScript, []string{k.lock, k.fence, k.holder, k.queue, k.stays, k.floor, k.handover}, []string{token, ms, s.keep, holder, stayMS, at, grantCh})
	arr, err := res.ToArray()
	if err != nil {
		return lease.Grant{}, s.fail(err)
	}
	if len(arr) < 2 {
		return lease.Grant{}, malformed("acquire")
	}
	ok, err1 := arr[0].AsInt64()
	n, err2 := arr[1].AsInt64()
	if err1 != nil || err2 != nil {
		return lease.Grant{}, malformed("acquire")
	}
	if ok == 0 {
		held := &lease.HeldError{Key: key, TTL: remaining(n)}
		if len(arr) > 2 {
			if held.Holder, err = arr[2].ToString(); err != nil {
				return lease.Grant{}, malformed("acquire")
			}
		}
		if len(arr) > 3 {
			ahead, err := arr[3].AsInt64()
			if err != nil {
				return lease.Grant{}, malformed("acquire")
			}
			held.Position = int(ahead)
		}
		if n == 0 && held.Position > 0 {
			held.TTL = 0 // free, promised to a waiter ahead
		}
		if stay > 0 {
			s.hot.Mark(key)
		}
		// A place in the queue is not confirmed on the replicas: lost in
		// a failover, the waiter takes a new one with its next attempt.
		return lease.Grant{}, held
	}
	if len(arr) < 3 || n <= 0 {
		return lease.Grant{}, malformed("acquire")
	}
	granted, err := arr[2].AsInt64()
	if err != nil {
		return lease.Grant{}, malformed("acquire")
	}
	if err := s.confirm(ctx, p); err != nil {
		s.releaseUnconfirmed(ctx, k.lock, k.holder, token)
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(n), TTL: time.Duration(granted) * time.Millisecond}, nil
}

// releaseUnconfirmed releases a grant whose replicas did not confirm it,
// so that the primary does not keep a lock its caller was told it did not
// get (with its holder key, as a release does). It is not confirmed
// itself: if it is lost in a failover, the lock expires with its TTL
// there, and nobody holds it meanwhile. It wakes no waiter: the lock was
// never reported granted.
func (s *Store) releaseUnconfirmed(ctx context.Context, lock, holder, token string) {
	ctx, cancel := s.afterUnconfirmed(ctx)
	defer cancel()
	_ = releaseScript.Exec(ctx, s.c, []string{lock, lock + ":queue", lock + ":stays", holder, lock + ":fence", lock + ":floor", lock + ":handover"}, []string{token, "", "0", "0", "0"}).Error()
}

// remaining converts a PTTL reply of an existing lock to a duration: at
// least 1ms (the key exists, so it is held), 0 for a lock without expiry
// (never written by this store).
func remaining(pttl int64) time.Duration {
	switch {
	case pttl < 0:
		return 0
	case pttl == 0:
		return time.Millisecond
	}
	return time.Duration(pttl) * time.Millisecond
}

func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return lease.Grant{}, err
	}
	lock, fence, hk := s.leaseKeys3(key)
	return s.renew(ctx, []string{lock, fence, hk}, token, ttl, s.keep)
}

// renew runs the renew script on a lease's keys (lock, fence, holder) for
// token: the lease view's and the slot claims'. keep is the fence key's
// retention argument.
func (s *Store) renew(ctx context.Context, keys []string, token string, ttl time.Duration, keep string) (lease.Grant, error) {
	ms, arg := s.ttlArg(ttl)
	res, p := s.write(ctx, renewScript, keys, []string{token, arg, keep}, false)
	f, err := res.AsInt64()
	if err != nil {
		return lease.Grant{}, s.fail(err)
	}
	if f <= 0 {
		return lease.Grant{}, lease.ErrNotHeld
	}
	if err := s.confirm(ctx, p); err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(f), TTL: time.Duration(ms) * time.Millisecond}, nil
}

func (v leases) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return err
	}
	k := s.allKeys(key)
	lock, wake := k.lock, k.wake
	// The key goes to a waiter that took a hand-over only where the
	// release waits for no replica (see AcquireHandover).
	cn, need, err := s.confirming(ctx, lock, false)
	if err != nil {
		return s.fail(err)
	}
	handover := "0"
	if need == 0 {
		handover = "1"
	}
	relKeys := []string{lock, k.queue, k.stays, k.holder, k.fence, k.floor, k.handover}
	relArgs := []string{token, wake, s.shardedFlag(), handover, s.keep}
	var (
		n   int64
		res rclient.Result
		p   *pending
	)
	if s.delex.Load() && !s.hot.Is(key) {
		res, p = s.writeCmd(ctx, rclient.Cmd{Name: "DELEX", Keys: []string{lock}, Args: []string{"IFEQ", token}})
		n, err = res.AsInt64()
		if msg, ok := rclient.ServerError(err); ok {
			if !strings.Contains(strings.ToLower(msg), "unknown command") {
				// Never pass on a reply that might echo the token.
				return s.classify(errors.New(strings.ReplaceAll(msg, token, "<token>")), err)
			}
			// A node without DELEX (a mixed-version cluster): nothing
			// was deleted; use the script from now on.
			s.delex.Store(false)
			res, p = s.writeAt(ctx, cn, need, releaseScript, relKeys, relArgs)
			n, err = res.AsInt64()
		} else if err == nil && n == 1 {
			// DELEX cannot publish: wake the key's waiters with a command
			// of its own (a lost one is made good by their polling).
			s.c.Do(ctx, s.publishCmd(wake))
		}
	} else {
		res, p = s.writeAt(ctx, cn, need, releaseScript, relKeys, relArgs)
		n, err = res.AsInt64()
	}
	if err != nil {
		return s.fail(err)
	}
	if n != 1 {
		return lease.ErrNotHeld
	}
	return s.confirm(ctx, p)
}

// grantChannel is this store's channel for the hand-overs of the key whose
// wake channel is wake: under the key's hash tag, and named by a random
// string of the store's, so that a release finds it subscribed only while
// this store (its process) listens.
func (s *Store) grantChannel(wake string) string { return wake + ":" + s.grants }

// shardedFlag is the scripts' argument that says whether to wake waiters
// with SPUBLISH (Redis Cluster) or PUBLISH.
func (s *Store) shardedFlag() string {
	if s.cluster {
		return "1"
	}
	return "0"
}

// publishCmd wakes the waiters that watch channel.
func (s *Store) publishCmd(channel string) rclient.Cmd {
	name := "PUBLISH"
	if s.cluster {
		name = "SPUBLISH"
	}
	return rclient.Cmd{Name: name, Keys: []string{channel}, Args: []string{""}}
}

// Leave gives token's place in key's queue up (leasedriver.Queuer); a
// waiter that was first wakes the others.
func (v leases) Leave(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return err
	}
	queue, stays, handover, wake := s.queueKeys(key)
	if err := leaveScript.Exec(ctx, s.c, []string{queue, stays, handover}, []string{token, wake, s.shardedFlag()}).Error(); err != nil {
		return s.fail(err)
	}
	return nil
}

// Watch subscribes to the channels a release of key publishes to
// (leasedriver.Waker): PUBLISH, or SPUBLISH on Redis Cluster, under the
// key's hash tag. There are two: the key's, which every watching process
// shares, and this store's own for the key, on which a release hands the
// key over (see AcquireHandover). It returns once the server confirmed
// both subscriptions. An expiry publishes nothing: a waiter polls at the
// holder's TTL.
func (v leases) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	s := v.s
	_, _, _, wake := s.queueKeys(key)
	ch, stop, err := s.watch(ctx, waiter, wake, s.grantChannel(wake))
	if err != nil {
		return nil, nil, s.fail(err)
	}
	return ch, stop, nil
}

func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	return v.s.inspectLease(ctx, key)
}

// inspectLease reads the state of a valid key in one read-only script.
func (s *Store) inspectLease(ctx context.Context, key string) (lease.Info, error) {
	lock, fence, hk := s.leaseKeys3(key)
	return s.inspectKeys(ctx, key, lock, fence, hk)
}

// inspectKeys reads a lease's lock, fence and holder keys (those of a
// lease or of a slot claim) in one read-only script.
func (s *Store) inspectKeys(ctx context.Context, key, lock, fence, hk string) (lease.Info, error) {
	arr, err := inspectScript.Exec(ctx, s.c, []string{lock, fence, hk}, nil).ToArray()
	if err != nil {
		return lease.Info{}, s.fail(err)
	}
	if len(arr) != 3 {
		return lease.Info{}, malformed("inspect")
	}
	pttl, err := arr[0].AsInt64()
	if err != nil {
		return lease.Info{}, malformed("inspect")
	}
	info := lease.Info{Key: key}
	if !arr[1].IsNil() {
		str, err := arr[1].ToString()
		if err != nil {
			return lease.Info{}, malformed("inspect")
		}
		if info.Fence, err = strconv.ParseUint(str, 10, 64); err != nil {
			return lease.Info{}, fmt.Errorf("redisstore: malformed fence key of %q", key)
		}
	}
	if pttl != -2 {
		info.Held = true
		info.TTL = remaining(pttl)
		if info.Holder, err = arr[2].ToString(); err != nil {
			return lease.Info{}, malformed("inspect")
		}
	}
	return info, nil
}
