// Package ratelimittest is the conformance suite every ratelimit.Store must
// pass, with memstore as the model.
//
// Each store's tests call [Run] with a function that returns a [Target]:
// the store under test, the store's clock when the test can drive it (the
// in-process stores), a listing of every piece of state the store holds
// with its time to live, and the means to cut the store off. The suite
// checks what each call returns against the model (memstore, replayed at
// the store's own decision times), and what the store really holds.
package ratelimittest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Faults breaks and heals the path between a Store and its server.
type Faults interface {
	// Cut makes the server unreachable: requests fail, in-flight replies are
	// lost.
	Cut()
	// DropReplies lets requests reach the server and apply, but loses every
	// reply.
	DropReplies()
	// Heal restores normal service.
	Heal()
}

// KeyTTL is one piece of state a store holds: its name (as the store
// spells it) and its time to live on the store's clock. A TTL <= 0 means it
// never expires, which the suite reports as a failure.
type KeyTTL struct {
	Key string
	TTL time.Duration
}

// Target is one store under test.
type Target struct {
	// Store is the store under test; Faults act on it. Required.
	Store ratelimit.Store
	// Clock is the store's clock when the test drives it (memstore,
	// sqlitestore); nil for stores on a real clock (Redis, PostgreSQL),
	// where the suite waits and polls the store's own judgement instead.
	Clock *Clock
	// Keys lists every key or row the store holds for this target (the
	// suite gives each target a store of its own, or a prefix of its own),
	// with its TTL. Required.
	Keys func(ctx context.Context) ([]KeyTTL, error)
	// Faults breaks the path between Store and its server. Required.
	Faults Faults
	// Poison, when set, stores a malformed value (with an expiry) under the
	// state of key, so that a decision reading it must fail before it
	// writes anything.
	Poison func(ctx context.Context, key driver.StateKey) error
	// NoBubble, when not empty, says why the store cannot be called from
	// a testing/synctest bubble; the skewed-caller case does not apply and
	// Run leaves it out (and logs why).
	NoBubble string
}

// Clock is a store clock that the suite moves by hand. It starts far from
// the real time, so a store that reads the wrong clock is caught.
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time (and then moves it by the step set with
// Tick).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// Tick makes every reading of the clock move it forward by step (0 stops
// it), so that no two readings are equal.
func (c *Clock) Tick(step time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break. Cut makes
// every call fail with ratelimit.ErrUnavailable without reaching the store;
// DropReplies lets every call apply and then loses its reply: the caller
// waits until its context ends, as it would for a reply lost on the wire.
func Wrap(s ratelimit.Store) (ratelimit.Store, Faults) {
	w := &wrapped{inner: s}
	return w, w
}

const (
	healthy int32 = iota
	cut
	dropping
)

type wrapped struct {
	inner ratelimit.Store
	mode  atomic.Int32
}

func (w *wrapped) Cut()         { w.mode.Store(cut) }
func (w *wrapped) DropReplies() { w.mode.Store(dropping) }
func (w *wrapped) Heal()        { w.mode.Store(healthy) }

var errUnreachable = errors.New("ratelimittest: store cut off")

func (w *wrapped) call(ctx context.Context, op func(ctx context.Context) error) error {
	switch w.mode.Load() {
	case cut:
		return errors.Join(ratelimit.ErrUnavailable, errUnreachable)
	case dropping:
		_ = op(context.WithoutCancel(ctx))
		<-ctx.Done()
		return errors.Join(ratelimit.ErrUnavailable, ctx.Err())
	}
	return op(ctx)
}

func (w *wrapped) Decide(ctx context.Context, reqs []driver.Request, commit bool) (ds []ratelimit.Decision, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		ds, err = w.inner.Decide(ctx, reqs, commit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// DecideOne forwards to the store's single-request path when it has one.
func (w *wrapped) DecideOne(ctx context.Context, r driver.Request, commit bool) (d ratelimit.Decision, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		if one, ok := w.inner.(driver.OneDecider); ok {
			d, err = one.DecideOne(ctx, r, commit)
			return err
		}
		var ds []ratelimit.Decision
		if ds, err = w.inner.Decide(ctx, []driver.Request{r}, commit); err == nil {
			d = ds[0]
		}
		return err
	})
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return d, nil
}

func (w *wrapped) Reset(ctx context.Context, keys []driver.StateKey) error {
	return w.call(ctx, func(ctx context.Context) error { return w.inner.Reset(ctx, keys) })
}

func (w *wrapped) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (g driver.PermitGrant, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		g, err = w.inner.AcquirePermit(ctx, key, id, permits, ttl)
		return err
	})
	if err != nil {
		return driver.PermitGrant{}, err
	}
	return g, nil
}

func (w *wrapped) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (g driver.PermitGrant, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		g, err = w.inner.RenewPermit(ctx, key, id, ttl)
		return err
	})
	if err != nil && !errors.Is(err, ratelimit.ErrPermitLost) {
		return driver.PermitGrant{}, err
	}
	return g, err
}

func (w *wrapped) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	return w.call(ctx, func(ctx context.Context) error { return w.inner.ReleasePermit(ctx, key, id) })
}
