package leasetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// queuer returns the store's queue of waiters, or skips the test on a
// store without one.
func queuer(t *testing.T, tg Target) leasedriver.Queuer {
	t.Helper()
	q, ok := tg.Store.(leasedriver.Queuer)
	if !ok {
		t.Skip("leasetest: the store keeps no queue of waiters (lease/driver.Queuer)")
	}
	return q
}

// queued asserts that err refuses a waiter with position ahead of it.
func queued(t *testing.T, err error, what string, position int) {
	t.Helper()
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Position != position {
		t.Fatalf("%s: %v, want a *lease.HeldError with Position %d", what, err, position)
	}
}

// testQueueOrder: a free key goes to the waiters in arrival order, and
// neither a later waiter nor a plain Acquire overtakes an earlier one.
func testQueueOrder(t *testing.T, tg Target) {
	q := queuer(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	w := []string{lease.NewToken(), lease.NewToken(), lease.NewToken()}
	for i, tok := range w {
		_, err := q.AcquireQueued(ctx, k, tok, 30*time.Second, "", 30*time.Second)
		queued(t, err, "a waiter while the key is held", i)
		var held *lease.HeldError
		if errors.As(err, &held) && held.TTL <= 0 {
			t.Fatalf("a waiter while the key is held: TTL %v", held.TTL)
		}
	}
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	_, err := q.AcquireQueued(ctx, k, w[2], 30*time.Second, "", 30*time.Second)
	queued(t, err, "the third waiter on the free key", 2)
	_, err = tg.Store.Acquire(ctx, k, lease.NewToken(), 30*time.Second)
	queued(t, err, "a plain Acquire of the free key with waiters", 3)
	_, err = q.AcquireQueued(ctx, k, w[1], 30*time.Second, "", 30*time.Second)
	queued(t, err, "the second waiter on the free key", 1)
	var last uint64
	for i, tok := range w {
		g, err := q.AcquireQueued(ctx, k, tok, 30*time.Second, "", 30*time.Second)
		if err != nil {
			t.Fatalf("waiter %d, first in the queue: %v", i, err)
		}
		if g.Fence <= last {
			t.Fatalf("waiter %d granted fence %d after %d", i, g.Fence, last)
		}
		last = g.Fence
		if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != g.Fence {
			t.Fatalf("after waiter %d's grant: %+v", i, info)
		}
		if err := tg.Store.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	// The queue is empty: anyone gets the free key.
	acquire(t, tg.Store, k, lease.NewToken(), 30*time.Second)
}

// testQueuePlaceExpires: a waiter that stops keeping its place loses it
// after its stay, and the waiter behind it gets the key.
func testQueuePlaceExpires(t *testing.T, tg Target) {
	q := queuer(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	gone, next := lease.NewToken(), lease.NewToken()
	_, err := q.AcquireQueued(ctx, k, gone, 30*time.Second, "", tg.Unit)
	queued(t, err, "the first waiter", 0)
	_, err = q.AcquireQueued(ctx, k, next, 30*time.Second, "", 30*time.Second)
	queued(t, err, "the second waiter", 1)
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10*tg.Unit + 5*time.Second); ; {
		_, err := q.AcquireQueued(ctx, k, next, 30*time.Second, "", 30*time.Second)
		if err == nil {
			break
		}
		queued(t, err, "the second waiter, the first one's place not yet gone", 1)
		if time.Now().After(deadline) {
			t.Fatal("the first waiter's place did not expire")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first waiter comes back: it has lost its place and waits behind.
	_, err = q.AcquireQueued(ctx, k, gone, 30*time.Second, "", 30*time.Second)
	queued(t, err, "the waiter whose place expired", 0)
	if info := inspect(t, tg.Direct, k); !info.Held {
		t.Fatalf("the second waiter's grant is not held: %+v", info)
	}
}

// testQueueLeave: a waiter that gives up leaves at once, and the one
// behind it is first.
func testQueueLeave(t *testing.T, tg Target) {
	q := queuer(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	first, second := lease.NewToken(), lease.NewToken()
	_, err := q.AcquireQueued(ctx, k, first, 30*time.Second, "", 30*time.Second)
	queued(t, err, "the first waiter", 0)
	_, err = q.AcquireQueued(ctx, k, second, 30*time.Second, "", 30*time.Second)
	queued(t, err, "the second waiter", 1)
	if err := q.Leave(ctx, k, first); err != nil {
		t.Fatal(err)
	}
	if err := q.Leave(ctx, k, lease.NewToken()); err != nil {
		t.Fatalf("leaving a queue one is not in: %v", err)
	}
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireQueued(ctx, k, second, 30*time.Second, "", 30*time.Second); err != nil {
		t.Fatalf("the second waiter after the first left: %v", err)
	}
	if _, err := q.AcquireQueued(ctx, k, "", 30*time.Second, "", 30*time.Second); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("an empty token: %v, want lease.ErrInvalid", err)
	}
	if _, err := q.AcquireQueued(ctx, k, lease.NewToken(), 30*time.Second, "", 0); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("a stay of 0: %v, want lease.ErrInvalid", err)
	}
}

// waiters returns how many waiters a plain Acquire of k finds ahead of it.
func waiters(t *testing.T, s lease.Store, k string) int {
	t.Helper()
	_, err := s.Acquire(ctxT(t), k, lease.NewToken(), 30*time.Second)
	var held *lease.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("a plain Acquire of a contended key: %v, want a *lease.HeldError", err)
	}
	return held.Position
}

// waitWaiters waits until k has n waiters.
func waitWaiters(t *testing.T, s lease.Store, k string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := waiters(t, s, k)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %s, want %d", got, k, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLockerFair: Lockers waiting on a held key get it in the order they
// started waiting, and one whose context ends leaves the queue.
func testLockerFair(t *testing.T, tg Target) {
	queuer(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	lk := NewLocker(t, tg.Store, nil)
	const n = 5
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	gaveUp := make(chan error, 1)
	for i := range n + 1 {
		wctx := ctx
		if i == 1 {
			// The second waiter gives up while queued.
			var cancel context.CancelFunc
			wctx, cancel = context.WithCancel(ctx)
			defer cancel()
			wg.Go(func() {
				_, err := lk.Acquire(wctx, k, 30*time.Second)
				gaveUp <- err
			})
			waitWaiters(t, tg.Store, k, i+1)
			cancel()
			if err := <-gaveUp; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter that gave up: %v", err)
			}
			waitWaiters(t, tg.Store, k, i)
			continue
		}
		wg.Go(func() {
			l, err := lk.Acquire(ctx, k, 30*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d's release: %v", i, err)
			}
		})
		// Each waiter is queued before the next starts.
		want := i + 1
		if i > 1 {
			want = i
		}
		waitWaiters(t, tg.Store, k, want)
	}
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []int{0, 2, 3, 4, 5}
	if len(order) != len(want) {
		t.Fatalf("grants in the order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("grants in the order %v, want %v (arrival order)", order, want)
		}
	}
}

// testWakeOnRelease: a store that wakes waiters tells a watcher of a key
// when it is released; on a store with a queue the wake-up names the
// waiter first in it, and a waiter that leaves first wakes the next one.
// A watcher for a waiter receives the wake-ups that name it, and none that
// names another waiter.
func testWakeOnRelease(t *testing.T, tg Target) {
	wk, ok := tg.Store.(leasedriver.Waker)
	if !ok {
		t.Skip("leasetest: the store does not wake waiters (lease/driver.Waker)")
	}
	ctx := ctxT(t)
	k := key(t, "k")
	holder := lease.NewToken()
	acquire(t, tg.Store, k, holder, 30*time.Second)
	wake, stop, err := wk.Watch(ctx, k, "")
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("leasetest: the store cannot wake waiters in this configuration: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	q, queues := tg.Store.(leasedriver.Queuer)
	var first, second string
	if queues {
		first, second = lease.NewToken(), lease.NewToken()
		for i, tok := range []string{first, second} {
			_, err := q.AcquireQueued(ctx, k, tok, 30*time.Second, "", 30*time.Second)
			queued(t, err, "a waiter while the key is held", i)
		}
	}
	var mine <-chan string // the second waiter's watcher
	if queues {
		ch, stop, err := wk.Watch(ctx, k, leasedriver.WaiterID(second))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		mine = ch
	}
	// A watcher of another key hears nothing of this one.
	other, stopOther, err := wk.Watch(ctx, key(t, "other"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer stopOther()
	if err := tg.Store.Release(ctx, k, holder); err != nil {
		t.Fatal(err)
	}
	awaitWake := func(what, want string) {
		t.Helper()
		for deadline := time.After(30 * time.Second); ; {
			select {
			case who := <-wake:
				if !queues || who == want {
					return
				}
				if who != "" {
					t.Fatalf("%s: the wake-up names %q, want %q (the waiter first now)", what, who, want)
				}
			case <-deadline:
				t.Fatalf("no wake-up %s", what)
			}
		}
	}
	awaitWake("after the release", leasedriver.WaiterID(first))
	if !queues {
		return
	}
	if err := q.Leave(ctx, k, first); err != nil {
		t.Fatal(err)
	}
	awaitWake("after the first waiter left the free key", leasedriver.WaiterID(second))
	select {
	case who := <-other:
		t.Fatalf("a watcher of another key was woken (%q)", who)
	default:
	}
	// The second waiter's watcher was passed the wake-up naming it, after
	// none naming the first (the release's).
	for deadline := time.After(30 * time.Second); ; {
		select {
		case who := <-mine:
			switch w, _, _ := leasedriver.ParseWake(who); w {
			case leasedriver.WaiterID(second):
				return
			case leasedriver.WaiterID(first):
				t.Fatalf("the second waiter's watcher received the wake-up naming the first waiter (%q): a release must wake only the waiter it names", who)
			}
		case <-deadline:
			t.Fatal("the second waiter's watcher received no wake-up naming it")
		}
	}
}

// testStaleReleaseQueued: the release of a contended key (one with a queue,
// whose release wakes or hands over to the next waiter) by a token whose
// lease expired and was granted on changes nothing: the holder keeps the
// key and its fence, and the waiter behind it is neither woken to take it
// nor handed it.
func testStaleReleaseQueued(t *testing.T, tg Target) {
	q := queuer(t, tg)
	ctx := ctxT(t)
	k := key(t, "k")
	stale, holder, next := lease.NewToken(), lease.NewToken(), lease.NewToken()
	acquire(t, tg.Store, k, stale, tg.Unit)
	_, err := q.AcquireQueued(ctx, k, holder, 30*time.Second, "holder", 30*time.Second)
	queued(t, err, "a waiter while the key is held", 0)
	waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	g, err := q.AcquireQueued(ctx, k, holder, 30*time.Second, "holder", 30*time.Second)
	if err != nil {
		t.Fatalf("the first waiter on the expired key: %v", err)
	}
	if h, ok := tg.Store.(leasedriver.Handover); ok {
		if wk, ok := tg.Store.(leasedriver.Waker); ok {
			if _, stop, err := wk.Watch(ctx, k, leasedriver.WaiterID(next)); err == nil {
				defer stop()
			}
		}
		_, err = h.AcquireHandover(ctx, k, next, 30*time.Second, "next", 30*time.Second, 1)
	} else {
		_, err = q.AcquireQueued(ctx, k, next, 30*time.Second, "next", 30*time.Second)
	}
	queued(t, err, "the next waiter", 0)
	if err := tg.Store.Release(ctx, k, stale); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("the expired token's release: %v, want ErrNotHeld", err)
	}
	info := inspect(t, tg.Direct, k)
	if !info.Held || info.Fence != g.Fence || info.TTL < 20*time.Second {
		t.Fatalf("after the expired token's release the store has %+v, want the key held with fence %d", info, g.Fence)
	}
	if r, err := tg.Store.Renew(ctx, k, holder, 30*time.Second); err != nil || r.Fence != g.Fence {
		t.Fatalf("the holder's renew: %+v, %v; want fence %d", r, err, g.Fence)
	}
}
