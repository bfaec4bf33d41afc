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

// TestAcquireWithStayKeepsPlace: an acquire with stay keeps the caller's
// place in the key's queue across its own attempts; a refusal says how
// many wait ahead; a plain acquire never overtakes; leave gives the place
// up; a bad stay is refused and writes nothing.
func TestAcquireWithStayKeepsPlace(t *testing.T) {
	e := newEnv(t, nil)
	const key = "jobs/queued"
	acquire := func(token string, stay time.Duration) (int, []byte) {
		st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/acquire",
			serveapi.AcquireLease{Key: key, Token: token, TTL: serveapi.Duration(time.Minute), Stay: serveapi.Duration(stay)})
		return st, b
	}
	heldAt := func(what string, st int, b []byte, position int, free bool) {
		t.Helper()
		var p serveapi.Problem
		if err := json.Unmarshal(b, &p); st != 409 || err != nil || p.Type != serveapi.TypeHeld || p.Position != position || (p.TTL == 0) != free {
			t.Fatalf("%s: %d %s; want held with position %d (free %v)", what, st, b, position, free)
		}
	}
	if st, b := acquire("holder-token", 0); st != 200 {
		t.Fatalf("the holder's acquire: %d %s", st, b)
	}
	st, b := acquire("waiter-one", 30*time.Second)
	heldAt("the first waiter", st, b, 0, false)
	st, b = acquire("waiter-two", 30*time.Second)
	heldAt("the second waiter", st, b, 1, false)
	st, b = acquire("newcomer", 0)
	heldAt("a plain acquire", st, b, 2, false)
	for what, stay := range map[string]time.Duration{"negative": -time.Second, "above the longest TTL": 25 * time.Hour} {
		if st, b := acquire("bad-stay", stay); st != 400 {
			t.Fatalf("a %s stay: %d %s, want 400", what, st, b)
		}
	}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/release", serveapi.LeaseToken{Key: key, Token: "holder-token"}); st != 204 {
		t.Fatalf("release: %d %s", st, b)
	}
	st, b = acquire("waiter-two", 30*time.Second)
	heldAt("the second waiter on the free key", st, b, 1, true)
	st, b = acquire("waiter-one", 30*time.Second)
	var g serveapi.LeaseGrant
	if err := json.Unmarshal(b, &g); st != 200 || err != nil || g.Fence == 0 {
		t.Fatalf("the first waiter on the free key: %d %s", st, b)
	}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/leave", serveapi.LeaseToken{Key: key, Token: "waiter-two"}); st != 204 {
		t.Fatalf("leave: %d %s", st, b)
	}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/release", serveapi.LeaseToken{Key: key, Token: "waiter-one"}); st != 204 {
		t.Fatalf("the first waiter's release: %d %s", st, b)
	}
	// The queue is empty: a plain acquire gets the key.
	if st, b := acquire("newcomer", 0); st != 200 {
		t.Fatalf("a plain acquire after the queue emptied: %d %s", st, b)
	}
}
