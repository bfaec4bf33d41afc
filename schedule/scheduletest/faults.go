package scheduletest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
)

// Clock is a fake clock for stores whose clock can be injected (memstore,
// sqlitestore) or followed (PostgreSQL, through Follow). It only moves when
// told to. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	t       time.Time
	follows []func(time.Time)
}

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
	c.notify()
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.notify()
}

// Follow calls f with the clock's time now and after every change, before
// Set or Add returns: for a store whose clock lives outside the process
// (a table a database's clock function reads, say). Calls are serialized
// in the order of the changes.
func (c *Clock) Follow(f func(time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follows = append(c.follows, f)
	f(c.t)
}

func (c *Clock) notify() {
	for _, f := range c.follows {
		f(c.t)
	}
}

// Faulty wraps a schedule.Store (and its claims lease store) so that a
// test can cut one node off: after Cut every call fails with
// ErrUnavailable without reaching the store, as for a node whose process
// died or whose network is gone.
type Faulty struct {
	inner schedule.Store
	cut   atomic.Bool
	nows  atomic.Int64
}

// NewFaulty wraps s.
func NewFaulty(s schedule.Store) *Faulty { return &Faulty{inner: s} }

// Cut makes every later call fail.
func (f *Faulty) Cut() { f.cut.Store(true) }

// Heal restores the connection.
func (f *Faulty) Heal() { f.cut.Store(false) }

var errCut = errors.New("scheduletest: node cut off")

func (f *Faulty) check() error {
	if f.cut.Load() {
		return errors.Join(schedule.ErrUnavailable, lease.ErrUnavailable, errCut)
	}
	return nil
}

// Claims returns the wrapped claims store, cut off together.
func (f *Faulty) Claims() lease.Store { return faultyLeases{f, f.inner.Claims()} }

// Polls returns how often Now was called: a Scheduler reads the store's
// clock once at the start of every poll.
func (f *Faulty) Polls() int64 { return f.nows.Load() }

// Now implements schedule.Store.
func (f *Faulty) Now(ctx context.Context) (time.Time, error) {
	f.nows.Add(1)
	if err := f.check(); err != nil {
		return time.Time{}, err
	}
	return f.inner.Now(ctx)
}

// Begin implements schedule.Store.
func (f *Faulty) Begin(ctx context.Context, r schedule.BeginRequest) (schedule.Record, error) {
	if err := f.check(); err != nil {
		return schedule.Record{}, err
	}
	return f.inner.Begin(ctx, r)
}

// Finish implements schedule.Store.
func (f *Faulty) Finish(ctx context.Context, r schedule.FinishRequest) (schedule.Record, error) {
	if err := f.check(); err != nil {
		return schedule.Record{}, err
	}
	return f.inner.Finish(ctx, r)
}

// Mark implements schedule.Store.
func (f *Faulty) Mark(ctx context.Context, r schedule.MarkRequest) (schedule.Record, bool, error) {
	if err := f.check(); err != nil {
		return schedule.Record{}, false, err
	}
	return f.inner.Mark(ctx, r)
}

// Slot implements schedule.Store.
func (f *Faulty) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	if err := f.check(); err != nil {
		return schedule.Record{}, err
	}
	return f.inner.Slot(ctx, job, id)
}

// Slots implements schedule.Store.
func (f *Faulty) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.inner.Slots(ctx, job, from, to, limit)
}

// Unfinished implements schedule.Store.
func (f *Faulty) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.inner.Unfinished(ctx, job, limit)
}

// Last implements schedule.Store.
func (f *Faulty) Last(ctx context.Context, job string) (time.Time, bool, error) {
	if err := f.check(); err != nil {
		return time.Time{}, false, err
	}
	return f.inner.Last(ctx, job)
}

// Register implements schedule.Store.
func (f *Faulty) Register(ctx context.Context, r schedule.RegisterRequest) (schedule.Definition, error) {
	if err := f.check(); err != nil {
		return schedule.Definition{}, err
	}
	return f.inner.Register(ctx, r)
}

// Definition implements schedule.Store.
func (f *Faulty) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	if err := f.check(); err != nil {
		return schedule.Definition{}, err
	}
	return f.inner.Definition(ctx, job)
}

type faultyLeases struct {
	f     *Faulty
	inner lease.Store
}

func (l faultyLeases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := l.f.check(); err != nil {
		return lease.Grant{}, err
	}
	return l.inner.Acquire(ctx, key, token, ttl)
}

func (l faultyLeases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := l.f.check(); err != nil {
		return lease.Grant{}, err
	}
	return l.inner.Renew(ctx, key, token, ttl)
}

func (l faultyLeases) Release(ctx context.Context, key, token string) error {
	if err := l.f.check(); err != nil {
		return err
	}
	return l.inner.Release(ctx, key, token)
}

func (l faultyLeases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := l.f.check(); err != nil {
		return lease.Info{}, err
	}
	return l.inner.Inspect(ctx, key)
}
