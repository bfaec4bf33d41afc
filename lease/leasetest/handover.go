package leasetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// handover returns the store's hand-over and its wake-ups, or skips the
// test on a store without them.
func handover(t *testing.T, tg Target) (leasedriver.Handover, leasedriver.Waker) {
	t.Helper()
	h, ok := tg.Store.(leasedriver.Handover)
	wk, wakes := tg.Store.(leasedriver.Waker)
	if !ok || !wakes {
		t.Skip("leasetest: the store hands no key over (lease/driver.Handover)")
	}
	if tg.EndWatchers == nil {
		t.Fatal("leasetest: a store with hand-over needs Target.EndWatchers")
	}
	return h, wk
}

// watch watches k on wk for every wake-up, failing the test if the store
// cannot.
func watch(t *testing.T, wk leasedriver.Waker, k string) <-chan string {
	t.Helper()
	ch, stop, err := wk.Watch(ctxT(t), k, "")
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("leasetest: the store cannot wake waiters in this configuration: %v", err)
	}
	if err != nil {
		t.Fatalf("Watch(%s): %v", k, err)
	}
	t.Cleanup(stop)
	return ch
}

// awaitWake returns the first wake-up on ch that names waiter, within 30s.
func awaitWake(t *testing.T, ch <-chan string, waiter, what string) (fence, attempt uint64) {
	t.Helper()
	for deadline := time.After(30 * time.Second); ; {
		select {
		case w := <-ch:
			if who, f, a := leasedriver.ParseWake(w); who == waiter {
				return f, a
			}
		case <-deadline:
			t.Fatalf("no wake-up naming the waiter %s", what)
		}
	}
}

// testHandover: a release hands the key to the first waiter that took a
// hand-over and watches it: the key is the waiter's at once (a new
// tenure, with its holder), its place is gone, the wake-up carries the
// grant's fence and the attempt whose place the release found, and a
// waiter that missed the wake-up finds the key its own at its next
// attempt, with the same fence.
func testHandover(t *testing.T, tg Target) {
	h, wk := handover(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	wake := watch(t, wk, k)
	holder := lease.NewToken()
	first := acquire(t, tg.Store, k, holder, 30*time.Second)
	a, b := lease.NewToken(), lease.NewToken()
	sent := time.Now() // before a's attempt: its grant ends 30s after it, or later
	for i, tok := range []string{a, b} {
		_, err := h.AcquireHandover(ctx, k, tok, 30*time.Second, []string{"waiter-a", "waiter-b"}[i], 30*time.Second, uint64(7+i))
		queued(t, err, "a waiter taking a hand-over while the key is held", i)
	}
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	fence, attempt := awaitWake(t, wake, leasedriver.WaiterID(a), "handed the key")
	if fence <= first.Fence || attempt != 7 {
		t.Fatalf("the wake-up hands over fence %d from attempt %d, want a fence above %d from attempt 7", fence, attempt, first.Fence)
	}
	info, err := tg.Direct.Inspect(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != fence || info.Holder != "waiter-a" || info.TTL <= 0 || info.TTL > 30*time.Second {
		t.Fatalf("after the hand-over the store has %+v, want held by waiter-a with fence %d for at most 30s", info, fence)
	}
	// The grant runs for the TTL from the attempt, never less: the waiter
	// counts its validity from when it sent that attempt.
	if least := 30*time.Second - time.Since(sent) - 2*time.Millisecond; info.TTL < least {
		t.Fatalf("the handed grant has %v left, want at least %v (30s from the waiter's attempt)", info.TTL, least)
	}
	if g, err := tg.Store.Renew(ctx, k, a, 30*time.Second); err != nil || g.Fence != fence {
		t.Fatalf("the waiter renews the key handed to it: %+v, %v; want fence %d", g, err, fence)
	}
	if n := waiters(t, tg.Direct, k); n != 1 {
		t.Fatalf("%d waiters after the hand-over, want 1 (the handed waiter's place is gone)", n)
	}
	// The second waiter misses its wake-up: its next attempt finds the
	// key its own, with the fence it was handed.
	if err := tg.Store.Release(ctx, k, a); err != nil {
		t.Fatal(err)
	}
	fence2, _ := awaitWake(t, wake, leasedriver.WaiterID(b), "handed the key next")
	if fence2 <= fence {
		t.Fatalf("the second hand-over has fence %d, want above %d", fence2, fence)
	}
	g, err := h.AcquireHandover(ctx, k, b, 30*time.Second, "waiter-b", 30*time.Second, 9)
	if err != nil || g.Fence != fence2 {
		t.Fatalf("the handed waiter's next attempt: %+v, %v; want the key with fence %d", g, err, fence2)
	}
	if err := tg.Store.Release(ctx, k, b); err != nil {
		t.Fatal(err)
	}
	if info, err := tg.Direct.Inspect(ctx, k); err != nil || info.Held {
		t.Fatalf("after the last release the store has %+v, %v; want the key free", info, err)
	}
}

// testHandoverEnded: a waiter whose process ended (its wake-up
// connections closed) is never handed the key, which would then stay
// held for the waiter's whole TTL: the release frees the key, and the
// next live waiter takes it at once.
func testHandoverEnded(t *testing.T, tg Target) {
	h, wk := handover(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	watch(t, wk, k)
	gone := lease.NewToken()
	_, err := h.AcquireHandover(ctx, k, gone, 30*time.Second, "gone", 30*time.Second, 1)
	queued(t, err, "a waiter taking a hand-over while the key is held", 0)
	tg.EndWatchers(t)
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	info, err := tg.Direct.Inspect(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Fatalf("after the release the store has %+v: the key was handed to a waiter whose process ended, want it free", info)
	}
	// The waiter's place is kept for its stay: a waiter that is still
	// alive (whose connection only dropped) takes the key at its next
	// attempt, first in the queue.
	next := lease.NewToken()
	_, err = tg.Store.Acquire(ctx, k, next, 30*time.Second)
	queued(t, err, "a newcomer while the first waiter's place lasts", 1)
	if g, err := h.AcquireHandover(ctx, k, gone, 30*time.Second, "gone", 30*time.Second, 2); err != nil || g.Fence == 0 {
		t.Fatalf("the first waiter's next attempt: %+v, %v; want the key", g, err)
	}
}
