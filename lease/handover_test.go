package lease_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// handing is a memstore that takes hand-overs (leasedriver.Handover) and
// whose wake-ups the test sends itself: it records each attempt, and the
// test hands the key over as a store's release would.
type handing struct {
	lease.Store
	wake chan string

	mu       sync.Mutex
	token    string
	attempts []time.Time // when each attempt reached the store, by number-1
}

func (h *handing) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	return h.Store.(leasedriver.Queuer).AcquireQueued(ctx, key, token, ttl, holder, stay)
}

func (h *handing) Leave(ctx context.Context, key, token string) error {
	return h.Store.(leasedriver.Queuer).Leave(ctx, key, token)
}

func (h *handing) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	h.mu.Lock()
	h.token = token
	if int(attempt) != len(h.attempts)+1 {
		h.mu.Unlock()
		panic("attempts out of order")
	}
	h.attempts = append(h.attempts, time.Now())
	h.mu.Unlock()
	return h.AcquireQueued(ctx, key, token, ttl, holder, stay)
}

func (h *handing) Watch(ctx context.Context, key string) (<-chan string, func(), error) {
	return h.wake, func() {}, nil
}

// handOver releases key from holder and grants it to the waiter, as a
// release that hands over does, and returns the grant.
func (h *handing) handOver(t *testing.T, key, holder string) lease.Grant {
	t.Helper()
	if err := h.Store.Release(t.Context(), key, holder); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	token := h.token
	h.mu.Unlock()
	g, err := h.Store.(leasedriver.Queuer).AcquireQueued(t.Context(), key, token, 10*time.Second, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestHandoverWakeGrants: a wake-up that hands the key over ends the
// waiter's Acquire with the grant's fence, its validity counted from
// when the attempt the grant names was sent, not from the wake-up; a
// grant naming an attempt the waiter does not know is taken up by its
// next attempt instead.
func TestHandoverWakeGrants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		named uint64 // the attempt the wake-up names
	}{{"known attempt", 1}, {"unknown attempt", 99}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &handing{Store: newMem(t, nil).Leases(), wake: make(chan string, 1)}
				if _, err := h.Store.Acquire(t.Context(), "k", "holder", time.Minute); err != nil {
					t.Fatal(err)
				}
				lk := leasetest.NewLocker(t, h, &lease.Options{RetryMax: time.Second})
				var (
					l   *lease.Lease
					err error
				)
				done := make(chan struct{})
				go func() { defer close(done); l, err = lk.Acquire(t.Context(), "k", 10*time.Second) }()
				synctest.Wait() // the first attempt is refused; the waiter waits
				time.Sleep(300 * time.Millisecond)
				g := h.handOver(t, "k", "holder")
				h.mu.Lock()
				waiter, first := leasedriver.WaiterID(h.token), h.attempts[0]
				h.mu.Unlock()
				h.wake <- leasedriver.GrantWake(waiter, g.Fence, tc.named)
				<-done
				if err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				n, last := len(h.attempts), h.attempts[len(h.attempts)-1]
				h.mu.Unlock()
				// Default margin: 1% of the TTL plus 2ms.
				from, want := first, 1
				if tc.named != 1 {
					from, want = last, 2 // the next attempt found the key its own
				}
				if n != want || l.Fence() != g.Fence || !l.ValidUntil().Equal(from.Add(10*time.Second-102*time.Millisecond)) {
					t.Fatalf("after %d attempts the lease has fence %d valid until %v; want %d attempts, fence %d, valid until %v",
						n, l.Fence(), l.ValidUntil(), want, g.Fence, from.Add(10*time.Second-102*time.Millisecond))
				}
			})
		})
	}
}
