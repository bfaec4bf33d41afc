package etcdstore

import (
	"context"
	"fmt"
	"github.com/tenurekit/tenure"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "tenure/"

// MaxPrefixLen is the longest Options.Prefix in bytes.
const MaxPrefixLen = 256

// Sub-spaces of the prefix; see the package documentation.
const (
	lockSpace     = "lock/"
	resSpace      = "res/"
	admittedSpace = "admitted/"
)

// pipelineDelay is how long Acquire waits for the reply to its lease grant
// before it sends the lock transaction anyway. The grant was sent first, so
// it almost always reaches the Raft log first; if the transaction overtakes
// it, etcd refuses the transaction (lease not found), which Acquire sees and
// retries once the grant has answered.
const pipelineDelay = 100 * time.Millisecond

// Options configure a Store. Nil, and the zero value of each field, mean
// the defaults. [New] refuses a value out of its bounds with an error
// wrapping tenure.ErrInvalid.
type Options struct {
	// Prefix is put before every key the store reads or writes (see the
	// package documentation for the layout). Default (empty) "tenure/"
	// (DefaultPrefix). It must be valid UTF-8 without NUL bytes and at most
	// MaxPrefixLen (256) bytes. Stores whose prefixes differ, neither being
	// a prefix of the other, share nothing.
	Prefix string
	// RevokeTimeout bounds the best-effort clean-up calls the store makes
	// in the background (deleting a lock put on a lease whose ID turned
	// out to belong to another lease). Default (0) 2s
	// (DefaultRevokeTimeout). It must not be negative.
	RevokeTimeout time.Duration
}

// DefaultRevokeTimeout is the default of Options.RevokeTimeout.
const DefaultRevokeTimeout = 2 * time.Second

// Store keeps tenure's leases and fenced values in etcd. It is safe for
// concurrent use. Closing the client is the caller's business; the Store
// holds no other resources.
type Store struct {
	c             *clientv3.Client
	rpc           rpc
	prefix        string
	revokeTimeout time.Duration
	grants        grants  // the current etcd lease of each TTL class
	watches       watches // the watched keys of waiters (Watch)
	places        places  // the places of this store's waiters (AcquireQueued)
}

// New returns a Store on c. o may be nil for the defaults. A nil client or
// a bad option (see [Options]) is an error wrapping tenure.ErrInvalid. New
// does not contact the server.
func New(c *clientv3.Client, o *Options) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcdstore: nil *clientv3.Client", tenure.ErrInvalid)
	}
	s := &Store{c: c, prefix: DefaultPrefix, revokeTimeout: DefaultRevokeTimeout}
	if o != nil {
		if o.Prefix != "" {
			if err := validatePrefix(o.Prefix); err != nil {
				return nil, err
			}
			s.prefix = o.Prefix
		}
		if o.RevokeTimeout < 0 {
			return nil, fmt.Errorf("%w: etcdstore: Options.RevokeTimeout is %v, must not be negative (0 means the default %v)", tenure.ErrInvalid, o.RevokeTimeout, DefaultRevokeTimeout)
		}
		if o.RevokeTimeout > 0 {
			s.revokeTimeout = o.RevokeTimeout
		}
	}
	s.rpc = newRPC(c)
	return s, nil
}

func validatePrefix(p string) error {
	switch {
	case len(p) > MaxPrefixLen:
		return fmt.Errorf("%w: etcdstore: prefix is %d bytes, longer than %d", tenure.ErrInvalid, len(p), MaxPrefixLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: etcdstore: prefix is not valid UTF-8", tenure.ErrInvalid)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == 0 {
			return fmt.Errorf("%w: etcdstore: prefix contains NUL", tenure.ErrInvalid)
		}
	}
	return nil
}

func (s *Store) lockKey(key string) string   { return s.prefix + lockSpace + key }
func (s *Store) resKey(r string) string      { return s.prefix + resSpace + r }
func (s *Store) admittedKey(r string) string { return s.prefix + admittedSpace + r }
func encodeFence(f uint64) string            { return fmt.Sprintf("%020d", f) }
func decodeFence(b []byte) (uint64, error)   { return strconv.ParseUint(string(b), 10, 64) }
func ttlOf(seconds int64) time.Duration      { return time.Duration(seconds) * time.Second }
func newLeaseID() int64                      { return int64(rand.Uint64N(1<<63-1)) + 1 }

// ttlSeconds is the whole number of seconds asked of etcd for ttl.
func ttlSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// Leases returns the store's lease.Store view.
//
// The locks of one TTL class share etcd leases of ceil(ttl + 250ms) whole
// seconds (or etcd's minimum TTL), which nothing keeps alive: each lock ends
// at least ttl and at most that many seconds after the Acquire or Renew that
// put it there (see the package documentation). Grant.TTL is the least time
// the lock has from the start of the call. Renew moves the lock onto a lease
// that lives at least ttl from now. Info.TTL and HeldError.TTL are whole
// seconds, rounded down.
func (s *Store) Leases() lease.Store { return leases{s} }

// Compare returns a comparison for the caller's own etcd transaction that
// holds only while l is the current tenure of its key: the lock key exists
// and was created at revision l.Fence(). It fails once the lease was
// released, expired (etcd revoked it) or was taken over. Put it in the If of
// the transaction that does the protected write, so the holder check and
// the write are one atomic step on the server:
//
//	resp, err := c.Txn(ctx).If(es.Compare(l)).Then(clientv3.OpPut(k, v)).Commit()
//	// !resp.Succeeded: l no longer holds its key; nothing was written.
func (s *Store) Compare(l *lease.Lease) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.lockKey(l.Key())), "=", int64(l.Fence()))
}

// FencedPut writes value to resource if f is greater than every fence
// admitted for resource before, and records f as admitted, in one etcd
// transaction. Otherwise it returns a *fence.StaleError (errors.Is
// fence.ErrStale) carrying the admitted fence, and changes nothing. Fence 0
// is never admitted. Resource names follow the rules of lease keys.
func (s *Store) FencedPut(ctx context.Context, resource, value string, f uint64) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if f == 0 {
		obs.GuardRefused(ctx, "etcdstore", obs.GuardFencedSet)
		return &fence.StaleError{Resource: resource, Fence: f}
	}
	adm, enc := s.admittedKey(resource), encodeFence(f)
	put := ops(opPut(adm, enc, 0), opPut(s.resKey(resource), value, 0))
	// Fixed-width decimal values compare bytewise like the numbers. A value
	// comparison on a missing key fails, hence the first branch.
	resp, err := s.rpc.txn(ctx,
		cmps(cmpCreateRev(adm, cmpEqual, 0)),
		put,
		ops(opTxn(cmps(cmpValue(adm, cmpLess, enc)), put, ops(opGet(adm)))),
	)
	if err != nil {
		return wrapErr("fenced put", err)
	}
	if resp.Succeeded {
		return nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.GetSucceeded() {
		return nil
	}
	return staleFence(ctx, "fenced put", resource, f, inner.GetResponses()[0])
}

// staleFence is the *fence.StaleError of a refused admission of f for
// resource, the admitted fence read by get.
func staleFence(ctx context.Context, op, resource string, f uint64, get *pb.ResponseOp) error {
	stale := &fence.StaleError{Resource: resource, Fence: f}
	if kv := firstKV(get); kv != nil {
		cur, err := decodeFence(kv.Value)
		if err != nil {
			return fmt.Errorf("etcdstore: %s: admitted fence of %q is not a number", op, resource)
		}
		stale.Current = cur
	}
	obs.GuardRefused(ctx, "etcdstore", obs.GuardFencedSet)
	return stale
}

// HolderPut writes value to resource only while l is the current holder
// of its key: the lock holds l's token and was created at revision
// l.Fence() (etcd deletes it when its lease expires), and admits l's fence
// for resource as FencedPut does but also when it equals the admitted one
// (several writes in one tenure), all in one etcd transaction. It is the
// holder check atomic with the write: unlike FencedPut it refuses a holder
// whose lease ended even before the next holder wrote. Otherwise it
// returns lease.ErrNotHeld, or a *fence.StaleError if resource admitted a
// greater fence, and changes nothing.
func (s *Store) HolderPut(ctx context.Context, l *lease.Lease, resource, value string) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", lease.ErrInvalid)
	}
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if l.Fence() == 0 || l.Fence() > math.MaxInt64 {
		obs.GuardRefused(ctx, "etcdstore", obs.GuardCheckHolder)
		return lease.ErrNotHeld
	}
	lock := s.lockKey(l.Key())
	adm, enc := s.admittedKey(resource), encodeFence(l.Fence())
	// A value comparison on a missing key fails: a resource never written
	// takes the put.
	resp, err := s.rpc.txn(ctx,
		cmps(cmpCreateRev(lock, cmpEqual, int64(l.Fence())), cmpValue(lock, cmpEqual, l.Token().Reveal())),
		ops(opTxn(cmps(cmpValue(adm, cmpGreater, enc)), ops(opGet(adm)), ops(opPut(adm, enc, 0), opPut(s.resKey(resource), value, 0)))),
		nil,
	)
	if err != nil {
		return wrapErr("holder put", err)
	}
	if !resp.Succeeded {
		obs.GuardRefused(ctx, "etcdstore", obs.GuardCheckHolder)
		return lease.ErrNotHeld
	}
	inner := resp.Responses[0].GetResponseTxn()
	if !inner.GetSucceeded() {
		return nil
	}
	return staleFence(ctx, "holder put", resource, l.Fence(), inner.GetResponses()[0])
}

// FencedGet returns resource's value and the greatest fence admitted for it
// ("", 0 if FencedPut never wrote it).
func (s *Store) FencedGet(ctx context.Context, resource string) (value string, f uint64, err error) {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return "", 0, err
	}
	resp, err := s.rpc.txn(ctx, nil, ops(opGet(s.resKey(resource)), opGet(s.admittedKey(resource))), nil)
	if err != nil {
		return "", 0, wrapErr("fenced get", err)
	}
	if kv := firstKV(resp.Responses[1]); kv != nil {
		if f, err = decodeFence(kv.Value); err != nil {
			return "", 0, fmt.Errorf("etcdstore: fenced get: admitted fence of %q is not a number", resource)
		}
	}
	if kv := firstKV(resp.Responses[0]); kv != nil {
		value = string(kv.Value)
	}
	return value, f, nil
}
