// Package memstore is the in-process reference implementation of tenure's
// store contracts. It is what the conformance suites and property tests use
// as the model, and what single-process programs and tests can use directly.
//
// The store's clock is Options.Clock (time.Now by default), so tests can
// drive expiry deterministically. Fences come from [leasedriver.NextFence]: one
// more than the last, never below the clock in microseconds, so a process
// that restarts with an empty memstore still grants fences above every fence
// it granted before (as long as the clock did not go back).
//
// Lease records keep the holder's description (leasedriver.HolderAcquirer) and,
// once free, the time their lease ended. [Store.Sweep] (or
// [Store.StartSweeper]) drops the records whose lease ended; the store keeps
// one fence floor, the greatest fence of every record it dropped, and every
// new fence is above it, so a key whose record is gone still gets a fence
// above every earlier one, even after the clock went back. Idempotency
// records, sessions and rate limit state are dropped as the store is
// written.
//
// Everything is lost when the process exits; state shared by several
// processes belongs in one of the other stores.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/wakehub"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// Options configure a Store. Nil, and the zero value of each field, mean
// the defaults. [New] refuses a value out of its bounds with an error
// wrapping tenure.ErrInvalid.
type Options struct {
	// Clock is the store's clock. Default (nil) time.Now.
	Clock func() time.Time
	// LimitKeys is the most rate limit entries (one per key and limit) the
	// Limits view holds; see Store.Limits for what happens when it is
	// full. Default (0) DefaultLimitKeys. It must not be negative; there
	// is no upper bound beyond memory.
	LimitKeys int
}

// Store keeps tenure's state in memory. It is safe for concurrent use.
type Store struct {
	views     // per-primitive state; see views.go
	now       func() time.Time
	clock     func() time.Time // Options.Clock (nil: the process's clock)
	limitKeys int              // Options.LimitKeys, defaulted

	mu     sync.Mutex
	leases map[string]*leaseRec
	// leasesPeak is the most records leases held since it was last
	// rebuilt: a Go map keeps its memory after deletes, so Sweep rebuilds
	// it once it holds a quarter of that.
	leasesPeak int
	// floor is the greatest fence of every lease record dropped: every
	// new fence is above it.
	floor  uint64
	fenced map[string]fencedRec
	// queues are the waiters of contended keys (leasedriver.Queuer), in
	// arrival order; watchers the channels Watch hands out, by key.
	queues   map[string]waitQueue
	watchers wakehub.Hub
}

type leaseRec struct {
	token   string
	holder  string
	fence   uint64
	expires time.Time // the lease's end: its expiry, or the time it was released
}

// held reports whether r is in force at now.
func (r *leaseRec) held(now time.Time) bool { return r.token != "" && r.expires.After(now) }

type fencedRec struct {
	fence uint64
	value []byte
}

// New returns an empty Store configured by o (nil: the defaults). An
// option out of its bounds (see [Options]) is an error wrapping
// tenure.ErrInvalid.
func New(o *Options) (*Store, error) {
	s := &Store{now: time.Now, limitKeys: DefaultLimitKeys, leases: map[string]*leaseRec{}, fenced: map[string]fencedRec{},
		queues: map[string]waitQueue{}}
	if o == nil {
		return s, nil
	}
	if o.LimitKeys < 0 {
		return nil, fmt.Errorf("%w: memstore: Options.LimitKeys is %d, must not be negative (0 means the default %d)", tenure.ErrInvalid, o.LimitKeys, DefaultLimitKeys)
	}
	if o.Clock != nil {
		s.now, s.clock = o.Clock, o.Clock
	}
	if o.LimitKeys > 0 {
		s.limitKeys = o.LimitKeys
	}
	return s, nil
}

// Leases returns the store's lease.Store view.
func (s *Store) Leases() lease.Store { return leases{s} }

type leases struct{ s *Store }

// The lease view queues its waiters and wakes them.
var (
	_ leasedriver.Queuer = leases{}
	_ leasedriver.Waker  = leases{}
)

func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire that keeps holder with the grant
// (leasedriver.HolderAcquirer).
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquire(key, token, ttl, holder, 0)
}

// acquire grants key to token unless another holder has it or, the key
// being free, a live waiter other than token is first in its queue. A
// refused caller with stay > 0 is queued (or keeps its place) for stay; a
// granted one leaves the queue. s.mu is held.
func (s *Store) acquire(key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	now := s.now()
	r := s.leases[key]
	if r == nil || !r.held(now) || r.token != token {
		q := s.queue(key, now)
		ahead := q.index(token)
		if ahead < 0 {
			ahead = len(q)
		}
		if held := r != nil && r.held(now); held || ahead > 0 {
			if stay > 0 {
				if i := q.index(token); i >= 0 {
					q[i].until = now.Add(stay)
				} else {
					s.queues[key] = append(q, waiter{token: token, until: now.Add(stay)})
				}
			}
			e := &lease.HeldError{Key: key, Position: ahead}
			if held {
				e.TTL, e.Holder = r.expires.Sub(now), r.holder
			}
			return lease.Grant{}, e
		}
		s.dequeue(key, token, now)
	}
	if r == nil {
		r = &leaseRec{}
		s.leases[key] = r
		s.leasesPeak = max(s.leasesPeak, len(s.leases))
	}
	if r.token != token || !r.held(now) {
		r.token = token
		r.fence = leasedriver.NextFence(max(r.fence, s.floor), now)
	}
	r.holder = holder
	r.expires = now.Add(ttl)
	return lease.Grant{Fence: r.fence, TTL: ttl}, nil
}

// reclaim drops at most n lease records whose lease ended at least
// retention ago and that no waiter is queued for, raising the fence floor
// to their fences first, and reports how many it dropped and whether it
// stopped early; it examines at most sweepScanFactor×n records. s.mu is
// held.
func (s *Store) reclaim(now time.Time, n int, retention time.Duration) (dropped int, more bool) {
	examined := 0
	for k, r := range s.leases {
		if examined >= sweepScanFactor*n || dropped >= n {
			return dropped, true
		}
		examined++
		if r.held(now) || r.expires.After(now.Add(-retention)) || len(s.queue(k, now)) > 0 {
			continue
		}
		s.floor = max(s.floor, r.fence)
		delete(s.leases, k)
		dropped++
	}
	return dropped, false
}

func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := s.leases[key]
	if r == nil || r.token != token || !r.held(now) {
		return lease.Grant{}, lease.ErrNotHeld
	}
	r.expires = now.Add(ttl)
	return lease.Grant{Fence: r.fence, TTL: ttl}, nil
}

func (v leases) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.leases[key]
	now := s.now()
	if r == nil || r.token != token || !r.held(now) {
		return lease.ErrNotHeld
	}
	// Keep the record (without holder) so the next fence follows this one,
	// with the time the lease ended, from which its retention counts.
	r.token, r.holder = "", ""
	r.expires = now
	s.wake(key, now)
	return nil
}

func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return lease.Info{}, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	info := lease.Info{Key: key}
	if r := s.leases[key]; r != nil {
		info.Fence = r.fence
		if now := s.now(); r.held(now) {
			info.Held = true
			info.TTL = r.expires.Sub(now)
			info.Holder = r.holder
		}
	}
	return info, nil
}

// FencedSet writes value to resource if f is greater than every fence
// admitted for resource before (strict mode); otherwise it returns a
// *fence.StaleError and changes nothing.
func (s *Store) FencedSet(ctx context.Context, resource string, f uint64, value []byte) error {
	return s.fencedSet(ctx, resource, f, value, fence.Strict)
}

// FencedSetAtLeast is FencedSet that also admits a fence equal to the
// greatest admitted one (several writes in one tenure).
func (s *Store) FencedSetAtLeast(ctx context.Context, resource string, f uint64, value []byte) error {
	return s.fencedSet(ctx, resource, f, value, fence.AtLeast)
}

func (s *Store) fencedSet(ctx context.Context, resource string, f uint64, value []byte, mode fence.Mode) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.fenced[resource]
	if !mode.Admits(cur.fence, f) {
		obs.GuardRefused(ctx, "memstore", obs.GuardFencedSet)
		return &fence.StaleError{Resource: resource, Fence: f, Current: cur.fence}
	}
	s.fenced[resource] = fencedRec{fence: f, value: append([]byte(nil), value...)}
	return nil
}

// FencedGet returns resource's value and the fence that wrote it (nil, 0 if
// never written).
func (s *Store) FencedGet(ctx context.Context, resource string) ([]byte, uint64, error) {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.fenced[resource]
	return append([]byte(nil), r.value...), r.fence, nil
}

// HolderSet writes value to resource only while l is the current holder of
// its key: same token and fence, not expired on the store's clock. This is
// the strict holder check, atomic with the write; unlike a max-fence guard it
// refuses a holder whose lease expired even before the next holder wrote.
// Otherwise it returns lease.ErrNotHeld and changes nothing. The fence is
// admitted for resource as by FencedSetAtLeast.
func (s *Store) HolderSet(ctx context.Context, l *lease.Lease, resource string, value []byte) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.leases[l.Key()]
	if r == nil || r.token != l.Token().Reveal() || r.fence != l.Fence() || !r.held(s.now()) {
		obs.GuardRefused(ctx, "memstore", obs.GuardCheckHolder)
		return lease.ErrNotHeld
	}
	cur := s.fenced[resource]
	if !fence.AtLeast.Admits(cur.fence, l.Fence()) {
		obs.GuardRefused(ctx, "memstore", obs.GuardFencedSet)
		return &fence.StaleError{Resource: resource, Fence: l.Fence(), Current: cur.fence}
	}
	s.fenced[resource] = fencedRec{fence: l.Fence(), value: append([]byte(nil), value...)}
	return nil
}

// List returns the keys the store remembers that start with prefix and
// sort after after, in key order, at most limit of them (lease.Lister).
func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	keys := make([]string, 0, len(s.leases))
	for k := range s.leases {
		if strings.HasPrefix(k, prefix) && k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = keys[:min(len(keys), limit)]
	out := make([]lease.Info, 0, len(keys))
	for _, k := range keys {
		r := s.leases[k]
		info := lease.Info{Key: k, Fence: r.fence}
		if r.held(now) {
			info.Held, info.TTL, info.Holder = true, r.expires.Sub(now), r.holder
		}
		out = append(out, info)
	}
	return out, nil
}
