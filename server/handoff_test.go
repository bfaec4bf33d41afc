package server_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
)

// TestWaitingAcquireServedInOrder: acquires waiting through the API keep
// a place in the store's queue of waiters and get the key in the order
// they started waiting, woken by each release.
func TestWaitingAcquireServedInOrder(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	const key = "jobs/contended"
	if _, err := e.mem.Leases().Acquire(ctx, key, "first-holder-token", time.Minute); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		_, err := e.mem.Leases().Acquire(ctx, key, lease.NewToken(), time.Minute)
		var held *lease.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("a plain acquire of the contended key: %v", err)
		}
		return held.Position
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	const n = 4
	for i := range n {
		wg.Go(func() {
			st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/acquire",
				serveapi.AcquireLease{Key: key, TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(20 * time.Second)})
			var g serveapi.LeaseGrant
			if err := json.Unmarshal(b, &g); st != 200 || err != nil {
				t.Errorf("waiter %d: %d %s", i, st, b)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/release", serveapi.LeaseToken{Key: key, Token: g.Token}); st != 204 {
				t.Errorf("waiter %d's release: %d %s", i, st, b)
			}
		})
		for deadline := time.Now().Add(10 * time.Second); waiting() != i+1; {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d did not join the queue", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := e.mem.Leases().Release(ctx, key, "first-holder-token"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("grants in the order %v, want arrival order", order)
		}
	}
	if len(order) != n {
		t.Fatalf("%d grants, want %d", len(order), n)
	}
}
