// Package storekit holds the test clock and the fault injector that the
// conformance suites and package storetest share; storetest exports them.
package storekit

import (
	"sync"
	"time"
)

// Clock is a store clock that a test moves by hand: it only moves when
// told to (or, after Tick, by a fixed step at every reading). It is safe
// for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	step    time.Duration
	follows []func(time.Time)
}

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time (and then moves it by the step set with
// Tick, if any).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	if c.step != 0 {
		c.now = c.now.Add(c.step)
		c.notify()
	}
	return t
}

// Tick makes every reading of the clock move it forward by step (0 stops
// that), so that no two readings are equal.
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
	c.notify()
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.notify()
}

// Follow calls f with the clock's time now and after every change, before
// the change returns: for a store whose clock lives outside the process (a
// table a database's clock function reads, say). Calls are serialized in
// the order of the changes.
func (c *Clock) Follow(f func(time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follows = append(c.follows, f)
	f(c.now)
}

func (c *Clock) notify() {
	for _, f := range c.follows {
		f(c.now)
	}
}
