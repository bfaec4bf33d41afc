package memstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/memstore"
)

// fakeClock is the store's clock for the suite: time passes only when the
// suite advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestSessionConformance(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		ms := newMem(t, &memstore.Options{Clock: clock.Now})
		s, faults := sessiontest.Wrap(ms.Sessions())
		return sessiontest.Target{
			Store:   s,
			Direct:  ms.Sessions(),
			Faults:  faults,
			Advance: clock.Advance,
		}
	})
}

var _ func(*memstore.Store) session.Store = (*memstore.Store).Sessions
