package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// leases is the lease.Store view of a Store.
type leases struct{ s *Store }

// The lease view queues its waiters and wakes them.
var (
	_ leasedriver.Queuer = leases{}
	_ leasedriver.Waker  = leases{}
)

// holderSpace holds each lock's holder description, on the lock's etcd
// lease, so it goes when the lock goes.
const holderSpace = "holder/"

// cmpGreater compares greater than.
const cmpGreater = pb.Compare_GREATER

func (s *Store) holderKey(key string) string { return s.prefix + holderSpace + key }

// opMoveLease puts key onto lease id keeping its value.
func opMoveLease(key string, id int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
		Key: []byte(key), Lease: id, IgnoreValue: true,
	}}}
}

// attempts bounds the internal retries of one call (a transaction that
// overtook its lease grant, a holder's lease that ended meanwhile).
const attempts = 3

// grantResult is the outcome of a lease grant.
type grantResult struct {
	ttl int64 // seconds really granted
	err error
}

// shareWindow is the least time during which acquisitions and renewals of
// one TTL class join the same etcd lease: a class's lease is asked for
// ceil(ttl + shareWindow) seconds.
const shareWindow = 250 * time.Millisecond

// grantTimeout bounds a shared lease grant (it is not tied to the context
// of the call that started it, since other calls wait for it too).
const grantTimeout = 10 * time.Second

// sharedGrant is an etcd lease that the locks of one TTL class are put on
// while it lives long enough for them. It is never kept alive: each lock
// on it expires with it, at least ttl and less than ttl + shareWindow +
// 1s (or etcd's minimum TTL) after the call that put the lock there was
// made.
type sharedGrant struct {
	id   int64
	secs int64     // asked of etcd (etcd may grant more, never less)
	sent time.Time // when the grant was sent (monotonic clock)
	done chan struct{}
	res  grantResult // once done is closed
}

// grants holds the current shared lease of each TTL class.
type grants struct {
	mu  sync.Mutex
	cur map[int64]*sharedGrant // by secs
}

// expiresAfter reports whether the lease lives at least ttl after start:
// etcd applies the grant after it was sent, so the lease ends no earlier
// than sent + secs.
func (g *sharedGrant) expiresAfter(start time.Time, ttl time.Duration) bool {
	return !g.sent.Add(ttlOf(g.secs)).Before(start.Add(ttl))
}

// answered reports whether the grant has answered, with an error or not.
func (g *sharedGrant) answered() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// wait waits for the grant's answer, at most d; it reports whether the
// answer is in.
func (g *sharedGrant) wait(d time.Duration) bool {
	if g.answered() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.done:
		return true
	case <-t.C:
		return false
	}
}

// result waits for the grant's answer or the end of ctx.
func (g *sharedGrant) result(ctx context.Context) grantResult {
	select {
	case <-g.done:
		return g.res
	case <-ctx.Done():
		return grantResult{err: ctx.Err()}
	}
}

// leaseFor returns an etcd lease that lives at least ttl after start: the
// current lease of ttl's class, or a new one whose grant it sends (with an
// ID chosen here, so that a transaction can be sent on it before the
// grant's reply is in). A lease whose grant failed is replaced.
func (s *Store) leaseFor(ttl time.Duration, start time.Time) *sharedGrant {
	secs := ttlSeconds(ttl + shareWindow)
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	if g := s.grants.cur[secs]; g != nil && g.expiresAfter(start, ttl) && (!g.answered() || g.res.err == nil) {
		return g
	}
	g := &sharedGrant{id: newLeaseID(), secs: secs, sent: time.Now(), done: make(chan struct{})}
	if s.grants.cur == nil {
		s.grants.cur = map[int64]*sharedGrant{}
	}
	s.grants.cur[secs] = g
	go func() {
		ctx, cancel := context.WithTimeout(s.c.Ctx(), grantTimeout)
		defer cancel()
		_, ttl, err := s.rpc.grant(ctx, g.id, secs)
		g.res = grantResult{ttl: ttl, err: err}
		close(g.done)
	}()
	return g
}

// dropGrant forgets g as its class's lease (after its grant failed).
func (s *Store) dropGrant(g *sharedGrant) {
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	if s.grants.cur[g.secs] == g {
		delete(s.grants.cur, g.secs)
	}
}

// putOnLease runs the transaction built by txn on the lease for ttl (see
// leaseFor), sent once the grant answered or after pipelineDelay, and
// retries on a new lease when the transaction overtook the grant or the
// grant failed. It returns the transaction's reply, the lease and the
// grant's result, which the caller must check when the transaction put a
// key on the lease.
func (s *Store) putOnLease(ctx context.Context, ttl time.Duration, start time.Time,
	txn func(id int64) (*pb.TxnResponse, error)) (*pb.TxnResponse, *sharedGrant, error) {
	for attempt := 1; ; attempt++ {
		g := s.leaseFor(ttl, start)
		if g.wait(pipelineDelay) && g.res.err != nil {
			s.dropGrant(g)
			if attempt < attempts && !unavailable(g.res.err) {
				continue
			}
			return nil, nil, wrapErr("grant lease", g.res.err)
		}
		resp, err := txn(g.id)
		if isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) && attempt < attempts {
			// The txn overtook the grant, the grant failed, or the lease
			// ended (revoked from outside).
			if r := g.result(ctx); r.err != nil {
				s.dropGrant(g)
				if unavailable(r.err) {
					return nil, nil, wrapErr("grant lease", r.err)
				}
			} else if attempt > 1 {
				s.dropGrant(g)
			}
			continue
		}
		return resp, g, err
	}
}

// checkGrant waits for the grant of the lease a transaction put lock on
// and reports its failure. A lease ID that belonged to another lease
// already (about one chance in 2^63 per live lease) must not carry the
// lock: it is deleted again.
func (s *Store) checkGrant(ctx context.Context, g *sharedGrant, lock, token, op string) error {
	r := g.result(ctx)
	if r.err == nil {
		return nil
	}
	s.dropGrant(g)
	if isEtcdErr(r.err, rpctypes.ErrGRPCLeaseExist) {
		s.dropLock(lock, token, g.id)
		return fmt.Errorf("etcdstore: %s: lease ID collision, try again", op)
	}
	// The txn applied on a lease whose grant reply was lost.
	return wrapErr("grant lease", r.err)
}

// grantTTL is the time a lock put on g by a call made at start has at
// least: g ends no earlier than g.sent + g.secs.
func grantTTL(g *sharedGrant, start time.Time) time.Duration {
	return g.sent.Add(ttlOf(g.secs)).Sub(start).Truncate(time.Millisecond)
}

// Acquire puts the lock on an etcd lease that lives at least ttl (see
// leaseFor: the locks of one TTL class share one lease at a time, which
// nothing keeps alive) in one txn:
//
//	If(CreateRevision(lock) == 0)
//	Then(Put(lock, token, lease), Get(lock))
//	Else(Txn(If(Value(lock) == token)
//	         Then(Get(lock), Put(lock, token, lease))   // re-acquire: move onto the new lease
//	         Else(Get(lock))))                          // busy
//
// A Put on an existing key keeps its create revision, so a re-acquire keeps
// the fence and is renewed to at least ttl.
//
// A new lease's ID is chosen here, so the txn can be sent before the
// grant's reply arrives (after pipelineDelay): an acquire whose replies are
// lost still takes effect, and a retry with the same token reconciles it.
func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire that keeps holder with the grant
// (leasedriver.HolderAcquirer): in a key next to the lock, on the lock's etcd
// lease, written in the same txn.
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	return v.acquire(ctx, key, token, ttl, holder, nil)
}

// acquire runs the acquire txn. A plain acquire (p nil) takes a free lock
// only when no waiter is queued for it; a queued one when its place is
// still there and no live waiter arrived before it, and it deletes its
// place with the grant, or keeps it (put again on p's lease) with a
// refusal.
func (v leases) acquire(ctx context.Context, key, token string, ttl time.Duration, holder string, p *place) (lease.Grant, error) {
	s := v.s
	start := time.Now()
	lock, hk, wp := s.lockKey(key), s.holderKey(key), s.waitersPrefix(key)
	for attempt := 1; ; attempt++ {
		gate := cmps(cmpCreateRev(lock, cmpEqual, 0), cmpRangeCreateRev(wp, cmpEqual, 0)) // free, no waiter
		var rev int64
		if p != nil && p.rev > 0 {
			rev = p.rev
			gate = cmps(cmpCreateRev(lock, cmpEqual, 0), cmpCreateRev(p.key, cmpEqual, rev),
				cmpRangeCreateRev(wp, cmpGreater, rev-1)) // free, and none before this waiter
		}
		// A waiter's first attempt (p.rev 0) has the plain gate: with no
		// waiter at all the free key is its; otherwise it counts every
		// waiter as ahead of it (before its own place is put) and takes
		// its place at the back, in the same txn.
		resp, g, err := s.putOnLease(ctx, ttl, start, func(id int64) (*pb.TxnResponse, error) {
			granted := ops(opPut(lock, token, id), opGet(lock), opPut(hk, holder, id))
			again := ops(opGet(lock), opPut(lock, token, id), opPut(hk, holder, id))
			busy := ops(opGet(lock), opGet(hk), opCountWaiters(wp, rev))
			if p != nil {
				granted = append(granted, opDelete(p.key))
				again = append(again, opDelete(p.key))
				busy = append(busy, opPut(p.key, "", p.lease), opGet(p.key))
			}
			return s.rpc.txn(ctx, gate, granted, ops(opTxn(cmps(cmpValue(lock, cmpEqual, token)), again, busy)))
		})
		if err != nil {
			// The lock may be on the lease now: a retry with the same
			// token reconciles, a release removes it, or it expires.
			if g == nil {
				return lease.Grant{}, err
			}
			return lease.Grant{}, wrapErr("acquire", err)
		}

		var fenceRev int64
		if resp.Succeeded {
			kv := firstKV(resp.Responses[1])
			if kv == nil {
				return lease.Grant{}, fmt.Errorf("etcdstore: acquire %q: lock missing in its own txn", key)
			}
			fenceRev = kv.CreateRevision
		} else {
			inner := resp.Responses[0].GetResponseTxn()
			kv := firstKV(inner.GetResponses()[0])
			if !inner.GetSucceeded() {
				// Busy: held by another token, or promised to the
				// waiters ahead.
				ahead := len(inner.GetResponses()[2].GetResponseRange().GetKvs())
				if p != nil {
					// The txn put the place just before reading it.
					switch pk := firstKV(inner.GetResponses()[4]); {
					case pk == nil:
					case p.rev == 0:
						// The first attempt took the place.
						p.rev = pk.CreateRevision
						s.places.set(p.key, p.rev)
					case pk.CreateRevision != p.rev:
						// The place is kept; one that had expired was
						// taken anew, at the back.
						s.places.set(p.key, pk.CreateRevision)
						return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Millisecond, Position: ahead}
					}
				}
				if kv == nil {
					if ahead > 0 {
						return lease.Grant{}, &lease.HeldError{Key: key, Position: ahead}
					}
					if attempt < attempts {
						continue // the waiters ahead left meanwhile
					}
					return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Millisecond}
				}
				left, err := s.rpc.timeToLive(ctx, kv.Lease)
				if err != nil {
					return lease.Grant{}, wrapErr("acquire: holder's ttl", err)
				}
				if left < 0 && attempt < attempts {
					continue // the holder's lease ended meanwhile
				}
				var who string
				if h := firstKV(inner.GetResponses()[1]); h != nil {
					who = string(h.Value)
				}
				return lease.Grant{}, &lease.HeldError{Key: key, TTL: ttlOf(max(left, 0)), Holder: who, Position: ahead}
			}
			if kv == nil {
				return lease.Grant{}, fmt.Errorf("etcdstore: acquire %q: lock missing in its own txn", key)
			}
			fenceRev = kv.CreateRevision
		}
		if p != nil {
			s.places.drop(p.key)
		}
		if err := s.checkGrant(ctx, g, lock, token, fmt.Sprintf("acquire %q", key)); err != nil {
			return lease.Grant{}, err
		}
		return lease.Grant{Fence: uint64(fenceRev), TTL: grantTTL(g, start)}, nil
	}
}

// dropLock deletes lock if token holds it on lease id, best effort.
func (s *Store) dropLock(lock, token string, id int64) {
	ctx, cancel := context.WithTimeout(s.c.Ctx(), s.revokeTimeout)
	defer cancel()
	s.rpc.txn(ctx, cmps(
		cmpValue(lock, cmpEqual, token),
		cmpLease(lock, cmpEqual, id),
	), ops(opDelete(lock)), nil)
}

// Renew moves the lock held by token onto an etcd lease that lives at
// least ttl from now (the current lease of ttl's class), keeping its create
// revision and so its fence, in one txn:
//
//	If(Value(lock) == token) Then(Put(lock, token, lease), Get(lock))
//
// No etcd lease is ever kept alive, so a renewal extends only its own
// lock. A lock whose key etcd has deleted (its lease expired) is never
// brought back: the compare fails.
func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	start := time.Now()
	lock, hk := s.lockKey(key), s.holderKey(key)
	resp, g, err := s.putOnLease(ctx, ttl, start, func(id int64) (*pb.TxnResponse, error) {
		return s.rpc.txn(ctx,
			cmps(cmpValue(lock, cmpEqual, token)),
			ops(opPut(lock, token, id), opGet(lock),
				// The holder description moves onto the new lease with
				// the lock (a lock from before descriptions has none).
				opTxn(cmps(cmpCreateRev(hk, cmpGreater, 0)), ops(opMoveLease(hk, id)), nil)),
			nil,
		)
	})
	if err != nil {
		if g == nil {
			return lease.Grant{}, err
		}
		return lease.Grant{}, wrapErr("renew", err)
	}
	if !resp.Succeeded {
		return lease.Grant{}, lease.ErrNotHeld
	}
	kv := firstKV(resp.Responses[1])
	if kv == nil {
		return lease.Grant{}, fmt.Errorf("etcdstore: renew %q: lock missing in its own txn", key)
	}
	if err := s.checkGrant(ctx, g, lock, token, fmt.Sprintf("renew %q", key)); err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(kv.CreateRevision), TTL: grantTTL(g, start)}, nil
}

// Release deletes the lock and its holder description if the lock's value
// is token, in one txn. Its etcd lease is left to expire (other locks may
// be on it). Nothing of the key is left: the next grant's fence is a later
// revision whatever was deleted.
func (v leases) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	lock := s.lockKey(key)
	resp, err := s.rpc.txn(ctx,
		cmps(cmpValue(lock, cmpEqual, token)),
		ops(opDelete(lock), opDelete(s.holderKey(key))),
		nil,
	)
	if err != nil {
		return wrapErr("release", err)
	}
	if !resp.Succeeded {
		return lease.ErrNotHeld
	}
	return nil
}

// Inspect reads the lock and holder keys in one txn and asks etcd for the
// lock's remaining TTL. The key is held while its lock key exists, that is
// until etcd revokes the expired lease; a free key reads fence 0 (nothing
// of an ended lease is kept).
func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	s := v.s
	resp, err := s.rpc.txn(ctx, nil, ops(opGet(s.lockKey(key)), opGet(s.holderKey(key))), nil)
	if err != nil {
		return lease.Info{}, wrapErr("inspect", err)
	}
	info := lease.Info{Key: key}
	kv := firstKV(resp.Responses[0])
	if kv == nil {
		return info, nil
	}
	info.Fence = uint64(kv.CreateRevision)
	left, err := s.rpc.timeToLive(ctx, kv.Lease)
	if err != nil {
		return lease.Info{}, wrapErr("inspect", err)
	}
	if left >= 0 {
		info.Held, info.TTL = true, ttlOf(left)
		if h := firstKV(resp.Responses[1]); h != nil {
			info.Holder = string(h.Value)
		}
	}
	return info, nil
}

// List returns the keys with a lock (held, or expired and not yet revoked
// by etcd) that start with prefix and sort after after, in key order, at
// most limit of them, with the current holder's description
// (lease.Lister). It reads one page of locks and the descriptions in the
// same key range (one txn), and each distinct etcd lease's remaining TTL
// once: its cost follows the keys held, not every key ever locked.
func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	s := v.s
	start := prefix
	if after >= prefix {
		start = after + "\x00"
	}
	end := prefixEnd(prefix)
	rng := func(space string) *pb.RequestOp {
		r := &pb.RangeRequest{Key: []byte(s.prefix + space + start), Limit: int64(limit)}
		if end == "" {
			r.RangeEnd = []byte(prefixEnd(s.prefix + space))
		} else {
			r.RangeEnd = []byte(s.prefix + space + end)
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
	}
	// Descriptions exist only for keys with a lock, so the first limit of
	// them cover the page of locks.
	resp, err := s.rpc.txn(ctx, nil, ops(rng(lockSpace), rng(holderSpace)), nil)
	if err != nil {
		return nil, wrapErr("list", err)
	}
	holders := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		holders[strings.TrimPrefix(string(kv.Key), s.prefix+holderSpace)] = string(kv.Value)
	}
	ttls := map[int64]int64{}
	var out []lease.Info
	for _, l := range resp.Responses[0].GetResponseRange().GetKvs() {
		k := strings.TrimPrefix(string(l.Key), s.prefix+lockSpace)
		info := lease.Info{Key: k, Fence: uint64(l.CreateRevision)}
		left, ok := ttls[l.Lease]
		if !ok {
			if left, err = s.rpc.timeToLive(ctx, l.Lease); err != nil {
				return nil, wrapErr("list", err)
			}
			ttls[l.Lease] = left
		}
		if left >= 0 {
			info.Held, info.TTL, info.Holder = true, ttlOf(left), holders[k]
		}
		out = append(out, info)
	}
	return out, nil
}

// prefixEnd returns the smallest key after every key that starts with p
// ("" when there is none: p is empty or all 0xff).
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}
