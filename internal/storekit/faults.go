package storekit

import (
	"context"
	"errors"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/session"
)

// Faults is a client-side fault hook for stores that have no network path
// to break (memstore, sqlitestore): the stores it wraps (Leases,
// Idempotency, Limits, Sessions, Schedules) pass every call through it.
// Cut makes every call fail with the primitive's ErrUnavailable without
// reaching the store; DropReplies lets every call apply and then loses its
// reply (the caller waits until its context ends, as it would for a reply
// lost on the wire); Delay holds every call back for a while before it
// reaches the store; Pause holds every call back until Resume. Heal
// restores normal service. The zero value is healthy and ready to use; it
// is safe for concurrent use.
type Faults struct {
	mode  atomic.Int32
	delay atomic.Int64
	mu    sync.Mutex
	gate  chan struct{} // non-nil while paused; closed by Resume
}

const (
	healthy int32 = iota
	cut
	dropping
)

// NewFaults returns a healthy fault hook.
func NewFaults() *Faults { return &Faults{} }

// Cut makes the store unreachable: every call fails with the primitive's
// ErrUnavailable and changes nothing.
func (f *Faults) Cut() { f.mode.Store(cut) }

// IsCut reports whether Cut is in force.
func (f *Faults) IsCut() bool { return f.mode.Load() == cut }

// DropReplies lets every call reach the store and apply, then loses its
// reply: the caller gets the primitive's ErrUnavailable when its context
// ends.
func (f *Faults) DropReplies() { f.mode.Store(dropping) }

// Delay holds every call back for d before it reaches the store (0 stops
// that); a call whose context ends first fails with ErrUnavailable.
func (f *Faults) Delay(d time.Duration) { f.delay.Store(int64(d)) }

// Pause holds every call back before it reaches the store until Resume (or
// Heal); a call whose context ends first fails with ErrUnavailable.
func (f *Faults) Pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate == nil {
		f.gate = make(chan struct{})
	}
}

// Resume lets the calls held by Pause go on.
func (f *Faults) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

// Heal restores normal service: no cut, no lost replies, no delay, no
// pause.
func (f *Faults) Heal() {
	f.mode.Store(healthy)
	f.delay.Store(0)
	f.Resume()
}

var errUnreachable = errors.New("storetest: store cut off")

// call runs op under the current faults; unavailable is the primitive's
// ErrUnavailable (or a join of several).
func (f *Faults) call(ctx context.Context, unavailable error, op func(ctx context.Context) error) error {
	if f.mode.Load() == cut {
		return errors.Join(unavailable, errUnreachable)
	}
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return errors.Join(unavailable, ctx.Err())
		}
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return errors.Join(unavailable, ctx.Err())
		}
	}
	switch f.mode.Load() {
	case cut:
		return errors.Join(unavailable, errUnreachable)
	case dropping:
		_ = op(context.WithoutCancel(ctx))
		<-ctx.Done()
		return errors.Join(unavailable, ctx.Err())
	}
	return op(ctx)
}

// do is call for an operation with a result: on a fault the result is
// T's zero value; otherwise it is the store's own, with its error.
func do[T any](ctx context.Context, f *Faults, unavailable error, op func(ctx context.Context) (T, error)) (T, error) {
	var v T
	var opErr error
	if err := f.call(ctx, unavailable, func(ctx context.Context) error {
		v, opErr = op(ctx)
		return errFromStore
	}); err != errFromStore {
		var zero T
		return zero, err
	}
	return v, opErr
}

// errFromStore marks a call that reached the store and returned.
var errFromStore = errors.New("storekit: the store replied")

// Leases returns s behind f. A store with a queue of waiters
// (leasedriver.Queuer) keeps it behind f, and its wake-ups
// (leasedriver.Waker), which f does not break: a missed wake-up is made
// good by polling. Its hand-over (leasedriver.Handover) is kept too, its
// attempts behind f.
func (f *Faults) Leases(s lease.Store) lease.Store {
	w := faultyLeases{f, s, lease.ErrUnavailable}
	if _, ok := s.(leasedriver.Queuer); ok {
		if _, ok := s.(leasedriver.Handover); ok {
			return faultyHandover{faultyQueued{w}}
		}
		return faultyQueued{w}
	}
	return w
}

type faultyHandover struct{ faultyQueued }

func (w faultyHandover) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Grant, error) {
		return w.inner.(leasedriver.Handover).AcquireHandover(ctx, key, token, ttl, holder, stay, attempt)
	})
}

type faultyQueued struct{ faultyLeases }

func (w faultyQueued) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Grant, error) {
		return w.inner.(leasedriver.Queuer).AcquireQueued(ctx, key, token, ttl, holder, stay)
	})
}

func (w faultyQueued) Leave(ctx context.Context, key, token string) error {
	return w.f.call(ctx, w.unav, func(ctx context.Context) error { return w.inner.(leasedriver.Queuer).Leave(ctx, key, token) })
}

// Watch is the store's own, or errors.ErrUnsupported from a store that
// does not wake waiters.
func (w faultyQueued) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if wk, ok := w.inner.(leasedriver.Waker); ok {
		return wk.Watch(ctx, key, waiter)
	}
	return nil, nil, errors.ErrUnsupported
}

type faultyLeases struct {
	f     *Faults
	inner lease.Store
	unav  error
}

func (w faultyLeases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Grant, error) { return w.inner.Acquire(ctx, key, token, ttl) })
}

// AcquireHolder keeps the holder description with the grant where the
// store keeps one (leasedriver.HolderAcquirer).
func (w faultyLeases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Grant, error) {
		return leasedriver.AcquireAs(ctx, w.inner, key, token, ttl, holder)
	})
}

func (w faultyLeases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Grant, error) { return w.inner.Renew(ctx, key, token, ttl) })
}

func (w faultyLeases) Release(ctx context.Context, key, token string) error {
	return w.f.call(ctx, w.unav, func(ctx context.Context) error { return w.inner.Release(ctx, key, token) })
}

func (w faultyLeases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	return do(ctx, w.f, w.unav, func(ctx context.Context) (lease.Info, error) { return w.inner.Inspect(ctx, key) })
}

// Idempotency returns s behind f.
func (f *Faults) Idempotency(s idempotency.Store) idempotency.Store { return faultyIdem{f, s} }

type faultyIdem struct {
	f     *Faults
	inner idempotency.Store
}

func (w faultyIdem) Begin(ctx context.Context, b idemdriver.Begin) (idemdriver.Begun, error) {
	return do(ctx, w.f, idempotency.ErrUnavailable, func(ctx context.Context) (idemdriver.Begun, error) { return w.inner.Begin(ctx, b) })
}

func (w faultyIdem) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	return w.f.call(ctx, idempotency.ErrUnavailable, func(ctx context.Context) error { return w.inner.Renew(ctx, id, token, fence, ttl) })
}

func (w faultyIdem) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	return w.f.call(ctx, idempotency.ErrUnavailable, func(ctx context.Context) error {
		return w.inner.Complete(ctx, id, token, fence, out, retention)
	})
}

func (w faultyIdem) Release(ctx context.Context, id idempotency.ID, token string) error {
	return w.f.call(ctx, idempotency.ErrUnavailable, func(ctx context.Context) error { return w.inner.Release(ctx, id, token) })
}

func (w faultyIdem) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	return do(ctx, w.f, idempotency.ErrUnavailable, func(ctx context.Context) (idempotency.Record, error) { return w.inner.Inspect(ctx, id) })
}

// Limits returns s behind f. The result also has s's single-request path
// (driver.OneDecider), falling back to Decide when s has none.
func (f *Faults) Limits(s ratelimit.Store) ratelimit.Store { return faultyLimits{f, s} }

type faultyLimits struct {
	f     *Faults
	inner ratelimit.Store
}

func (w faultyLimits) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	return do(ctx, w.f, ratelimit.ErrUnavailable, func(ctx context.Context) ([]ratelimit.Decision, error) { return w.inner.Decide(ctx, reqs, commit) })
}

// DecideOne forwards to the store's single-request path when it has one.
func (w faultyLimits) DecideOne(ctx context.Context, r driver.Request, commit bool) (ratelimit.Decision, error) {
	return do(ctx, w.f, ratelimit.ErrUnavailable, func(ctx context.Context) (ratelimit.Decision, error) {
		if one, ok := w.inner.(driver.OneDecider); ok {
			return one.DecideOne(ctx, r, commit)
		}
		ds, err := w.inner.Decide(ctx, []driver.Request{r}, commit)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		return ds[0], nil
	})
}

func (w faultyLimits) Reset(ctx context.Context, keys []driver.StateKey) error {
	return w.f.call(ctx, ratelimit.ErrUnavailable, func(ctx context.Context) error { return w.inner.Reset(ctx, keys) })
}

func (w faultyLimits) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	return do(ctx, w.f, ratelimit.ErrUnavailable, func(ctx context.Context) (driver.PermitGrant, error) {
		return w.inner.AcquirePermit(ctx, key, id, permits, ttl)
	})
}

func (w faultyLimits) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (driver.PermitGrant, error) {
	return do(ctx, w.f, ratelimit.ErrUnavailable, func(ctx context.Context) (driver.PermitGrant, error) {
		return w.inner.RenewPermit(ctx, key, id, ttl)
	})
}

func (w faultyLimits) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	return w.f.call(ctx, ratelimit.ErrUnavailable, func(ctx context.Context) error { return w.inner.ReleasePermit(ctx, key, id) })
}

// Sessions returns s behind f.
func (f *Faults) Sessions(s session.Store) session.Store { return faultySessions{f, s} }

type faultySessions struct {
	f     *Faults
	inner session.Store
}

func (w faultySessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (session.Record, error) { return w.inner.Create(ctx, rec, idle, absolute) })
}

func (w faultySessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (session.Record, error) { return w.inner.Load(ctx, id, idle) })
}

func (w faultySessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (time.Time, error) { return w.inner.Touch(ctx, id, version, idle) })
}

func (w faultySessions) Save(ctx context.Context, id session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (session.Record, error) { return w.inner.Save(ctx, id, version, data, idle) })
}

func (w faultySessions) Rotate(ctx context.Context, old, newID session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (session.Record, error) {
		return w.inner.Rotate(ctx, old, newID, version, data, idle)
	})
}

func (w faultySessions) Delete(ctx context.Context, id session.ID) error {
	return w.f.call(ctx, session.ErrUnavailable, func(ctx context.Context) error { return w.inner.Delete(ctx, id) })
}

func (w faultySessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) (int, error) { return w.inner.DeleteUser(ctx, userID) })
}

func (w faultySessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	return do(ctx, w.f, session.ErrUnavailable, func(ctx context.Context) ([]session.Record, error) { return w.inner.List(ctx, userID) })
}

// Schedules returns s (and its claims store) behind f. A failed call's
// error wraps both schedule.ErrUnavailable and lease.ErrUnavailable.
func (f *Faults) Schedules(s schedule.Store) *Schedules { return &Schedules{Faults: f, inner: s} }

// Schedules is a schedule.Store behind a Faults (which it embeds: Cut,
// Heal and the rest act on it), counting its polls.
type Schedules struct {
	*Faults
	inner schedule.Store
	nows  atomic.Int64
}

var errSchedUnavailable = errors.Join(schedule.ErrUnavailable, lease.ErrUnavailable)

// Claims returns the wrapped claims store, behind the same faults.
func (s *Schedules) Claims() lease.Store {
	return faultyLeases{s.Faults, s.inner.Claims(), errSchedUnavailable}
}

// Polls returns how often Now was called: a Scheduler reads the store's
// clock once at the start of every poll.
func (s *Schedules) Polls() int64 { return s.nows.Load() }

// Now implements schedule.Store.
func (s *Schedules) Now(ctx context.Context) (time.Time, error) {
	s.nows.Add(1)
	return do(ctx, s.Faults, errSchedUnavailable, s.inner.Now)
}

// Begin implements schedule.Store.
func (s *Schedules) Begin(ctx context.Context, r scheddriver.BeginRequest) (schedule.Record, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (schedule.Record, error) { return s.inner.Begin(ctx, r) })
}

// Finish implements schedule.Store.
func (s *Schedules) Finish(ctx context.Context, r scheddriver.FinishRequest) (schedule.Record, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (schedule.Record, error) { return s.inner.Finish(ctx, r) })
}

// pair carries a two-value result through do.
type pair[A, B any] struct {
	a A
	b B
}

// Mark implements schedule.Store.
func (s *Schedules) Mark(ctx context.Context, r scheddriver.MarkRequest) (schedule.Record, bool, error) {
	p, err := do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (pair[schedule.Record, bool], error) {
		rec, ok, err := s.inner.Mark(ctx, r)
		return pair[schedule.Record, bool]{rec, ok}, err
	})
	return p.a, p.b, err
}

// Slot implements schedule.Store.
func (s *Schedules) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (schedule.Record, error) { return s.inner.Slot(ctx, job, id) })
}

// Slots implements schedule.Store.
func (s *Schedules) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) ([]schedule.Record, error) {
		return s.inner.Slots(ctx, job, from, to, limit)
	})
}

// Unfinished implements schedule.Store.
func (s *Schedules) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) ([]schedule.Record, error) { return s.inner.Unfinished(ctx, job, limit) })
}

// Last implements schedule.Store.
func (s *Schedules) Last(ctx context.Context, job string) (time.Time, bool, error) {
	p, err := do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (pair[time.Time, bool], error) {
		t, ok, err := s.inner.Last(ctx, job)
		return pair[time.Time, bool]{t, ok}, err
	})
	return p.a, p.b, err
}

// Register implements schedule.Store.
func (s *Schedules) Register(ctx context.Context, r scheddriver.RegisterRequest) (schedule.Definition, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (schedule.Definition, error) { return s.inner.Register(ctx, r) })
}

// Definition implements schedule.Store.
func (s *Schedules) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	return do(ctx, s.Faults, errSchedUnavailable, func(ctx context.Context) (schedule.Definition, error) { return s.inner.Definition(ctx, job) })
}
