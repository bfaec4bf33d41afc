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

func (h *handing) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
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
// when the attempt the grant names was sent, not from the wake-up. A
// grant naming another attempt than the waiter's last, or one whose
// validity ran out before the waiter read it (its process stopped
// meanwhile), is not taken: the next attempt, sent at once, finds what
// the store has (the key its own with the same fence, or a new grant).
func TestHandoverWakeGrants(t *testing.T) {
	for _, tc := range []struct {
		name     string
		named    uint64        // the attempt the wake-up names
		late     time.Duration // how long after the grant the wake-up is read
		attempts int           // the waiter's attempts
		newGrant bool          // whether the lease is a new grant, not the handed one
	}{
		{"last attempt", 1, 0, 1, false},
		{"unknown attempt", 99, 0, 2, false},
		{"grant ran out", 1, 11 * time.Second, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &handing{Store: newMem(t, nil).Leases(), wake: make(chan string, 1)}
				if _, err := h.Store.Acquire(t.Context(), "k", "holder", time.Minute); err != nil {
					t.Fatal(err)
				}
				lk := leasetest.NewLocker(t, h, &lease.Options{RetryMax: time.Minute})
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
				time.Sleep(tc.late)
				h.wake <- leasedriver.GrantWake(waiter, g.Fence, tc.named)
				<-done
				if err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				n, last := len(h.attempts), h.attempts[len(h.attempts)-1]
				h.mu.Unlock()
				// Default margin: 1% of the TTL plus 2ms.
				from := first
				if tc.attempts > 1 {
					from = last // the next attempt's own grant
				}
				if n != tc.attempts || (l.Fence() == g.Fence) == tc.newGrant || !l.ValidUntil().Equal(from.Add(10*time.Second-102*time.Millisecond)) {
					t.Fatalf("after %d attempts the lease has fence %d valid until %v; want %d attempts, the handed fence %d (%v), valid until %v",
						n, l.Fence(), l.ValidUntil(), tc.attempts, g.Fence, !tc.newGrant, from.Add(10*time.Second-102*time.Millisecond))
				}
			})
		})
	}
}

// TestHandoverOfAnEarlierAttemptIgnored: a grant naming an attempt older
// than the waiter's last is not taken, though its validity lies ahead:
// the last attempt was refused, so the key had changed hands since (a
// grant that ran out while the waiter's process was stopped). The
// waiter takes the next grant, to its last attempt.
func TestHandoverOfAnEarlierAttemptIgnored(t *testing.T) {
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
		time.Sleep(1500 * time.Millisecond) // attempts 1 and 2, both refused
		synctest.Wait()
		h.mu.Lock()
		waiter, n := leasedriver.WaiterID(h.token), len(h.attempts)
		h.mu.Unlock()
		if n != 2 {
			t.Fatalf("%d attempts after 1.5s, want 2", n)
		}
		h.wake <- leasedriver.GrantWake(waiter, 1<<60, 1) // to attempt 1
		synctest.Wait()                                   // taken or not: attempt 3, refused, if not
		h.mu.Lock()
		n = len(h.attempts)
		h.mu.Unlock()
		if n != 3 {
			t.Fatalf("%d attempts after a grant to attempt 1, want 3 (the grant not taken, the next attempt sent at once)", n)
		}
		g := h.handOver(t, "k", "holder")
		h.wake <- leasedriver.GrantWake(waiter, g.Fence, 3)
		<-done
		if err != nil || l.Fence() != g.Fence {
			t.Fatalf("Acquire = fence %d, %v; want the grant to attempt 3 (fence %d)", l.Fence(), err, g.Fence)
		}
	})
}
