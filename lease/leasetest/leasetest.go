// Package leasetest is the conformance suite every lease.Store must pass.
//
// Each store's tests call [Run] with a function that returns a [Target]: the
// store under test, an independent view of the same data, the means to break
// the connection to it, a restart of its server, and a fenced resource
// guarded by the store's own guard. The suite asserts what the store really
// holds (through Inspect on the independent view) as well as what each call
// returns. A bug fixed in one store gets a case here.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
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

// Resource is a value guarded by the store's fence guard, for the
// paused-holder tests.
type Resource interface {
	// FencedWrite sets name to value if fence is greater than every fence
	// admitted for name before; otherwise it returns an error wrapping
	// fence.ErrStale and changes nothing.
	FencedWrite(ctx context.Context, name string, fence uint64, value string) error
	// PlainWrite sets name to value unconditionally (the negative control).
	PlainWrite(ctx context.Context, name, value string) error
	// Read returns name's value ("" if unset).
	Read(ctx context.Context, name string) (string, error)
}

// AtLeastResource is a Resource whose guard also has the at-least mode
// (AdmitAtLeast, FencedSetAtLeast). The suite checks that mode when the
// Resource has it.
type AtLeastResource interface {
	// FencedWriteAtLeast sets name to value if fence is at least every
	// fence admitted for name before; otherwise it returns an error
	// wrapping fence.ErrStale and changes nothing.
	FencedWriteAtLeast(ctx context.Context, name string, fence uint64, value string) error
}

// HolderResource is a Resource that also has the store's strict holder
// check (CheckHolder, HolderSet, etcdstore's Compare) in front of a write.
// The suite checks it when the Resource has it.
type HolderResource interface {
	// HolderWrite sets name to value if l is the current holder of its key
	// (same token and fence, not expired on the store's clock); otherwise
	// it returns an error wrapping lease.ErrNotHeld and changes nothing.
	HolderWrite(ctx context.Context, l *lease.Lease, name, value string) error
}

// Target is one store under test.
type Target struct {
	// Store is the store under test; Faults act on it.
	Store lease.Store
	// Direct is an independent view of the same data that Faults do not
	// touch (a second client). Default Store.
	Direct lease.Store
	// Faults breaks the path between Store and its server. Required.
	Faults Faults
	// Restart restarts the store's server (or, for in-process stores,
	// replaces the store as a process restart would, losing what such a
	// restart loses) and returns the store to use afterwards. Required.
	Restart func(t *testing.T) lease.Store
	// Resource is a value behind the store's fence guard. Required. When
	// it also implements AtLeastResource or HolderResource, those guards
	// are checked too.
	Resource Resource
	// Forget, if set, makes the store lose every lease it holds and every
	// fence it granted, as a server without persistence that restarts or a
	// database restored from an old copy does, and returns the store to
	// use afterwards. The suite then checks that fences still never go
	// back (tenure floors a new fence at the store's clock).
	Forget func(t *testing.T) lease.Store
	// EndWatchers, for a store with hand-over (lease/driver.Handover),
	// ends the connections on which Store receives its wake-ups, as the
	// end of its process would (Store makes them again for later
	// watches), and returns once the server has seen them end. The
	// hand-over cases need it.
	EndWatchers func(t *testing.T)
	// Unit is a short TTL that the store grants exactly (etcd grants whole
	// seconds). Default 200ms.
	Unit time.Duration
	// Ended, if set, reaches what the store keeps of leases that ended,
	// for the cases that check the store keeps no state per ended lease
	// and that fences still never go back once that state is gone.
	Ended *Ended
}

// Ended reaches what a store keeps of leases that ended.
type Ended struct {
	// Reclaim returns once the store has dropped what it keeps of the
	// leases that ended before the call, the way it does that on its own
	// (a sweep, or its keys' expiry, waited for on the server's own
	// judgement).
	Reclaim func(t *testing.T)
	// Keys returns the lease keys beginning with prefix for which the
	// store keeps any record (a lock, a fence, a holder description, a
	// waiter), sorted. The store's records shared by many keys (a fence
	// floor) are not counted.
	Keys func(t *testing.T, prefix string) []string
	// Raise sets the fence the store keeps for key, held, to f, as a grant
	// made while the store's clock ran far ahead would have left it (or, as
	// seen afterwards, a clock that stepped back). Nil where fences do not
	// come from a clock (etcd's revisions); the cases then check the plain
	// fences.
	Raise func(t *testing.T, key string, f uint64)
	// Stall, if set, stops the store's next grants of key after they have
	// read what a grant reads (the fence floor, the key's record) and
	// before they write, until resume is called; stalled reports that a
	// grant is stopped there. For stores whose grant reads and writes in
	// steps between which a reclaim can run (a PostgreSQL statement reads
	// at its start); nil where a grant reads and writes under one lock or
	// in one script, and the case that uses it is skipped.
	Stall func(t *testing.T, key string) (stalled func() bool, resume func())
}

// Run runs the conformance suite. newTarget is called once per subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tg Target)
	}{
		{"InvalidInputWritesNothing", testInvalidInput},
		{"OneWinnerAmong100", testOneWinner},
		{"FencesIncrease", testFencesIncrease},
		{"ReacquireSameToken", testReacquire},
		{"StaleTokenCannotRenewOrRelease", testStaleToken},
		{"RenewAfterExpiryDoesNotResurrect", testRenewAfterExpiry},
		{"PausedHolderLosesToNext", testPausedHolder},
		{"GuardRejectsLateWrite", testGuardRejectsLateWrite},
		{"GuardStrictRefusesEqualFence", testGuardStrict},
		{"GuardAtLeast", testGuardAtLeast},
		{"HolderCheck", testHolderCheck},
		{"FenceAboveForgotten", testForget},
		{"DoneBeforeStoreExpiry", testDoneBeforeStoreExpiry},
		{"DoKeepsAlive", testDoKeepsAlive},
		{"DoLosesWhenUnreachable", testDoLoses},
		{"UnreachableIsAnError", testUnreachable},
		{"DroppedReplyReconciled", testDroppedReply},
		{"CancelledAcquireLeavesNoLock", testCancelledAcquire},
		{"FenceSurvivesRestart", testRestart},
		{"HolderDescribed", testHolder},
		{"QueueServesInArrivalOrder", testQueueOrder},
		{"QueuePlaceExpires", testQueuePlaceExpires},
		{"QueueLeave", testQueueLeave},
		{"StaleReleaseOfAContendedKey", testStaleReleaseQueued},
		{"LockerServesWaitersInOrder", testLockerFair},
		{"WakeOnRelease", testWakeOnRelease},
		{"HandoverGrantsTheFirstWaiter", testHandover},
		{"HandoverSkipsAWaiterWhoseProcessEnded", testHandoverEnded},
		{"EndedLeasesLeaveNoState", testEndedLeaveNoState},
		{"FenceAboveReclaimed", testFenceAboveReclaimed},
		{"FenceAboveReclaimedMidGrant", testReclaimMidGrant},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Store == nil || tg.Faults == nil || tg.Restart == nil || tg.Resource == nil {
				t.Fatal("leasetest: Target needs Store, Faults, Restart and Resource")
			}
			if tg.Direct == nil {
				tg.Direct = tg.Store
			}
			if tg.Unit <= 0 {
				tg.Unit = 200 * time.Millisecond
			}
			t.Cleanup(tg.Faults.Heal)
			tc.fn(t, tg)
		})
	}
}

// key returns a key unique to the running test.
func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("leasetest/%s/%d/%s", t.Name(), time.Now().UnixNano(), suffix)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func inspect(t *testing.T, s lease.Store, k string) lease.Info {
	t.Helper()
	info, err := s.Inspect(ctxT(t), k)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", k, err)
	}
	if info.Key != k {
		t.Fatalf("Inspect(%q).Key = %q", k, info.Key)
	}
	return info
}

// waitFree polls the store's own judgement until k is free.
func waitFree(t *testing.T, s lease.Store, k string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info := inspect(t, s, k)
		if !info.Held {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held (ttl %v) after %v", k, info.TTL, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func acquire(t *testing.T, s lease.Store, k, token string, ttl time.Duration) lease.Grant {
	t.Helper()
	g, err := s.Acquire(ctxT(t), k, token, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", k, err)
	}
	if g.Fence == 0 {
		t.Fatalf("Acquire(%q) granted fence 0", k)
	}
	if g.TTL < ttl {
		t.Fatalf("Acquire(%q) granted TTL %v, less than the %v asked for", k, g.TTL, ttl)
	}
	return g
}

func testInvalidInput(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Store
	k := key(t, "k")
	tok := lease.NewToken()
	long := strings.Repeat("k", lease.MaxKeyLen+1)
	cases := []struct {
		name string
		call func() error
	}{
		{"acquire empty key", func() error { _, err := s.Acquire(ctx, "", tok, time.Second); return err }},
		{"acquire long key", func() error { _, err := s.Acquire(ctx, long, tok, time.Second); return err }},
		{"acquire bad utf8 key", func() error { _, err := s.Acquire(ctx, "\xff\xfe", tok, time.Second); return err }},
		{"acquire key with NUL", func() error { _, err := s.Acquire(ctx, "a\x00b", tok, time.Second); return err }},
		{"acquire zero ttl", func() error { _, err := s.Acquire(ctx, k, tok, 0); return err }},
		{"acquire negative ttl", func() error { _, err := s.Acquire(ctx, k, tok, -time.Second); return err }},
		{"acquire sub-ms ttl", func() error { _, err := s.Acquire(ctx, k, tok, time.Microsecond); return err }},
		{"acquire ttl over max", func() error { _, err := s.Acquire(ctx, k, tok, lease.MaxTTL+time.Millisecond); return err }},
		{"acquire empty token", func() error { _, err := s.Acquire(ctx, k, "", time.Second); return err }},
		{"acquire long token", func() error {
			_, err := s.Acquire(ctx, k, strings.Repeat("t", lease.MaxTokenLen+1), time.Second)
			return err
		}},
		{"acquire token with NUL", func() error { _, err := s.Acquire(ctx, k, "a\x00b", time.Second); return err }},
		{"renew zero ttl", func() error { _, err := s.Renew(ctx, k, tok, 0); return err }},
		{"renew empty key", func() error { _, err := s.Renew(ctx, "", tok, time.Second); return err }},
		{"release empty token", func() error { return s.Release(ctx, k, "") }},
		{"release long key", func() error { return s.Release(ctx, long, tok) }},
		{"inspect empty key", func() error { _, err := s.Inspect(ctx, ""); return err }},
		{"locker zero ttl", func() error { _, err := NewLocker(t, s, nil).TryAcquire(ctx, k, 0); return err }},
		{"locker long key", func() error { _, err := NewLocker(t, s, nil).TryAcquire(ctx, long, time.Second); return err }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want lease.ErrInvalid", c.name, err)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("%s: error %q contains the token", c.name, err)
		}
	}
	if info := inspect(t, tg.Direct, k); info.Held || info.Fence != 0 {
		t.Fatalf("invalid calls wrote to %q: %+v", k, info)
	}
	// A valid acquire on the same key afterwards works.
	acquire(t, s, k, tok, time.Second)
}

func testOneWinner(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	ttl := 30 * time.Second
	const n = 100
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners []lease.Grant
		others  []error
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := lease.NewToken()
			<-start
			g, err := tg.Store.Acquire(ctx, k, tok, ttl)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				winners = append(winners, g)
			} else {
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d winners among %d contenders, want 1", len(winners), n)
	}
	for _, err := range others {
		var held *lease.HeldError
		if !errors.As(err, &held) || !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("loser error = %v, want *lease.HeldError", err)
		}
		if held.TTL <= 0 || held.TTL > ttl+time.Second || held.Key != k {
			t.Fatalf("HeldError = %+v, want key %q and 0 < TTL <= %v", held, k, ttl)
		}
	}
	info := inspect(t, tg.Direct, k)
	if !info.Held || info.Fence != winners[0].Fence {
		t.Fatalf("stored %+v, want held with fence %d", info, winners[0].Fence)
	}
}

func testFencesIncrease(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	var last uint64
	check := func(how string, g lease.Grant) {
		t.Helper()
		if g.Fence <= last {
			t.Fatalf("%s: fence %d not above previous %d", how, g.Fence, last)
		}
		last = g.Fence
		if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != g.Fence {
			t.Fatalf("%s: stored %+v, want held with fence %d", how, info, g.Fence)
		}
	}
	for i := 0; i < 5; i++ {
		tok := lease.NewToken()
		check("after release", acquire(t, tg.Store, k, tok, 10*time.Second))
		if err := tg.Store.Release(ctx, k, tok); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// A store may report the last fence of a released key until it
		// reclaims the key's record, or drop the record at once.
		if info := inspect(t, tg.Direct, k); info.Held || info.Fence != last && info.Fence != 0 {
			t.Fatalf("after release stored %+v, want free with last fence %d (or 0)", info, last)
		}
	}
	for i := 0; i < 2; i++ {
		tok := lease.NewToken()
		check("after expiry", acquire(t, tg.Store, k, tok, tg.Unit))
		waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	}
	// Through the Locker, across holders.
	lk := NewLocker(t, tg.Store, nil)
	for i := 0; i < 3; i++ {
		l, err := lk.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		check("locker", lease.Grant{Fence: l.Fence(), TTL: time.Second})
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l.Err() == nil {
			t.Fatal("released lease reports no error")
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("released lease's Done is open")
		}
	}
}

func testReacquire(t *testing.T, tg Target) {
	k := key(t, "k")
	tok := lease.NewToken()
	g1 := acquire(t, tg.Store, k, tok, 5*time.Second)
	g2 := acquire(t, tg.Store, k, tok, 20*time.Second)
	if g2.Fence != g1.Fence {
		t.Fatalf("re-acquire with the holding token: fence %d, want %d", g2.Fence, g1.Fence)
	}
	info := inspect(t, tg.Direct, k)
	if !info.Held || info.Fence != g1.Fence || info.TTL <= 5*time.Second {
		t.Fatalf("stored %+v, want held, fence %d, TTL renewed past 5s", info, g1.Fence)
	}
	// Another token is still refused.
	if _, err := tg.Store.Acquire(ctxT(t), k, lease.NewToken(), time.Second); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("other token: %v, want ErrHeld", err)
	}
}

// testHolder: a store that keeps holder descriptions (leasedriver.HolderAcquirer)
// reports the current holder's in Inspect, List and HeldError, keeps it on
// renewal, replaces it on re-acquisition, drops it on release, and refuses
// a bad one before writing.
func testHolder(t *testing.T, tg Target) {
	ha, ok := tg.Store.(leasedriver.HolderAcquirer)
	if !ok {
		t.Skip("the store keeps no holder descriptions (leasedriver.HolderAcquirer)")
	}
	ctx := ctxT(t)
	k := key(t, "k")
	for _, bad := range []string{strings.Repeat("h", lease.MaxHolderLen+1), "line\nbreak", "nul\x00", "\xff"} {
		if _, err := ha.AcquireHolder(ctx, k, lease.NewToken(), time.Second, bad); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("holder %q: %v, want ErrInvalid", bad, err)
		}
	}
	if info := inspect(t, tg.Direct, k); info.Held || info.Fence != 0 {
		t.Fatalf("a refused holder wrote: %+v", info)
	}
	tok := lease.NewToken()
	const who = "node-7 · nightly report ✓"
	g, err := ha.AcquireHolder(ctx, k, tok, 10*tg.Unit, who)
	if err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, tg.Direct, k); !info.Held || info.Holder != who {
		t.Fatalf("Inspect = %+v, want held by %q", info, who)
	}
	var held *lease.HeldError
	if _, err := ha.AcquireHolder(ctx, k, lease.NewToken(), tg.Unit, "other"); !errors.As(err, &held) || held.Holder != who {
		t.Fatalf("other token: %v, want a HeldError naming %q", err, who)
	}
	if _, err := tg.Store.Renew(ctx, k, tok, 10*tg.Unit); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, tg.Direct, k); info.Holder != who {
		t.Fatalf("after Renew: %+v, want holder kept", info)
	}
	if g2, err := ha.AcquireHolder(ctx, k, tok, 10*tg.Unit, "node-8"); err != nil || g2.Fence != g.Fence {
		t.Fatalf("re-acquire: %+v, %v", g2, err)
	}
	if info := inspect(t, tg.Direct, k); info.Holder != "node-8" {
		t.Fatalf("after re-acquire: %+v, want holder node-8", info)
	}
	if l, ok := tg.Direct.(lease.Lister); ok {
		infos, err := l.List(ctx, k, "", 10)
		if err != nil || len(infos) != 1 || infos[0].Holder != "node-8" || !infos[0].Held {
			t.Fatalf("List = %+v, %v; want one held key with holder node-8", infos, err)
		}
	}
	if err := tg.Store.Release(ctx, k, tok); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, tg.Direct, k); info.Held || info.Holder != "" || info.Fence != g.Fence && info.Fence != 0 {
		t.Fatalf("after Release: %+v, want free, no holder, fence %d (or 0)", info, g.Fence)
	}
	// A Locker passes its Options.Holder.
	lk := NewLocker(t, tg.Store, &lease.Options{Holder: "locker-a"})
	l, err := lk.TryAcquire(ctx, k, 10*tg.Unit)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if info := inspect(t, tg.Direct, k); info.Holder != "locker-a" {
		t.Fatalf("Locker's grant: %+v, want holder locker-a", info)
	}
}

func testStaleToken(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	a, b := lease.NewToken(), lease.NewToken()
	acquire(t, tg.Store, k, a, tg.Unit)
	waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	gb := acquire(t, tg.Store, k, b, 30*time.Second)
	if _, err := tg.Store.Renew(ctx, k, a, 30*time.Second); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("stale renew: %v, want ErrNotHeld", err)
	}
	if err := tg.Store.Release(ctx, k, a); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("stale release: %v, want ErrNotHeld", err)
	}
	info := inspect(t, tg.Direct, k)
	if !info.Held || info.Fence != gb.Fence || info.TTL < 20*time.Second {
		t.Fatalf("new holder disturbed: %+v, want held with fence %d", info, gb.Fence)
	}
	if g, err := tg.Store.Renew(ctx, k, b, 30*time.Second); err != nil || g.Fence != gb.Fence {
		t.Fatalf("holder's renew: %+v, %v", g, err)
	}
	if err := tg.Store.Release(ctx, k, b); err != nil {
		t.Fatalf("holder's release: %v", err)
	}
	if err := tg.Store.Release(ctx, k, b); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

func testRenewAfterExpiry(t *testing.T, tg Target) {
	k := key(t, "k")
	tok := lease.NewToken()
	g := acquire(t, tg.Store, k, tok, tg.Unit)
	waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	if _, err := tg.Store.Renew(ctxT(t), k, tok, 30*time.Second); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("renew after expiry: %v, want ErrNotHeld", err)
	}
	if info := inspect(t, tg.Direct, k); info.Held {
		t.Fatalf("renew after expiry resurrected the lease: %+v", info)
	}
	// The next holder gets a newer fence.
	if g2 := acquire(t, tg.Store, k, lease.NewToken(), time.Second); g2.Fence <= g.Fence {
		t.Fatalf("fence %d after expiry not above %d", g2.Fence, g.Fence)
	}
}

// testPausedHolder: A stops renewing (a stalled goroutine), B takes over,
// and A's lease handle learns it lost.
func testPausedHolder(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	lk := NewLocker(t, tg.Store, nil)
	a, err := lk.TryAcquire(ctx, k, tg.Unit)
	if err != nil {
		t.Fatal(err)
	}
	// A is paused: it neither renews nor releases.
	select {
	case <-a.Done():
	case <-time.After(10*tg.Unit + 5*time.Second):
		t.Fatal("A's Done never closed")
	}
	if !errors.Is(a.Err(), lease.ErrLost) {
		t.Fatalf("A.Err() = %v, want ErrLost", a.Err())
	}
	b, err := lk.Acquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A.Renew: %v, want ErrLost", err)
	}
	if _, err := tg.Store.Renew(ctx, k, a.Token().Reveal(), time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("A's token renew: %v, want ErrNotHeld", err)
	}
	if err := a.Release(ctx); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("A.Release: %v, want ErrNotHeld", err)
	}
	if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != b.Fence() {
		t.Fatalf("B disturbed by A: %+v, want held with fence %d", info, b.Fence())
	}
	if b.Err() != nil {
		t.Fatalf("B.Err() = %v", b.Err())
	}
}

// testGuardRejectsLateWrite runs many trials of the paused-holder
// failure (a holder that wakes after its lease expired and still writes) against the store's own guard, and the negative control.
func testGuardRejectsLateWrite(t *testing.T, tg Target) {
	ctx := ctxT(t)
	lk := NewLocker(t, tg.Store, nil)
	const trials = 10
	ttl := tg.Unit
	for i := 0; i < trials; i++ {
		k := key(t, fmt.Sprintf("trial-%d", i))
		guarded, plain := k+"/guarded", k+"/plain"
		for _, res := range []string{guarded, plain} {
			a, err := lk.TryAcquire(ctx, k, ttl)
			if err != nil {
				t.Fatal(err)
			}
			// A stalls past its lease; the store frees the key.
			<-a.Done()
			waitFree(t, tg.Direct, k, 10*ttl+5*time.Second)
			b, err := lk.TryAcquire(ctx, k, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if res == guarded {
				if err := tg.Resource.FencedWrite(ctx, res, b.Fence(), "B"); err != nil {
					t.Fatalf("trial %d: B's write: %v", i, err)
				}
				err := tg.Resource.FencedWrite(ctx, res, a.Fence(), "A-late")
				if !errors.Is(err, fence.ErrStale) {
					t.Fatalf("trial %d: A's late write: %v, want fence.ErrStale", i, err)
				}
			} else {
				if err := tg.Resource.PlainWrite(ctx, res, "B"); err != nil {
					t.Fatal(err)
				}
				if err := tg.Resource.PlainWrite(ctx, res, "A-late"); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if v, err := tg.Resource.Read(ctx, guarded); err != nil || v != "B" {
			t.Fatalf("trial %d: guarded value %q (%v), want B", i, v, err)
		}
		if v, err := tg.Resource.Read(ctx, plain); err != nil || v != "A-late" {
			t.Fatalf("trial %d: negative control kept %q (%v); the unguarded late write should overwrite B", i, v, err)
		}
	}
}

// testGuardStrict: the strict guard refuses a second write with the fence
// it admitted last (two writes of one tenure need the at-least mode).
func testGuardStrict(t *testing.T, tg Target) {
	ctx := ctxT(t)
	l, err := NewLocker(t, tg.Store, nil).TryAcquire(ctx, key(t, "k"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	res := key(t, "res")
	if err := tg.Resource.FencedWrite(ctx, res, l.Fence(), "first"); err != nil {
		t.Fatalf("first write with fence %d: %v", l.Fence(), err)
	}
	if err := tg.Resource.FencedWrite(ctx, res, l.Fence(), "again"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("second strict write with the same fence %d: %v, want fence.ErrStale", l.Fence(), err)
	}
	if v, err := tg.Resource.Read(ctx, res); err != nil || v != "first" {
		t.Fatalf("value %q (%v), want first", v, err)
	}
}

// testGuardAtLeast: the at-least guard admits the fence it admitted last
// again, and refuses an older one.
func testGuardAtLeast(t *testing.T, tg Target) {
	r, ok := tg.Resource.(AtLeastResource)
	if !ok {
		t.Skip("leasetest: the Resource has no at-least mode (FencedWriteAtLeast)")
	}
	ctx := ctxT(t)
	lk := NewLocker(t, tg.Store, nil)
	k, res := key(t, "k"), key(t, "res")
	a, err := lk.TryAcquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := lk.TryAcquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	for i, v := range []string{"B1", "B2"} {
		if err := r.FencedWriteAtLeast(ctx, res, b.Fence(), v); err != nil {
			t.Fatalf("write %d of one tenure (fence %d): %v", i+1, b.Fence(), err)
		}
	}
	if err := r.FencedWriteAtLeast(ctx, res, a.Fence(), "A-late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("an older tenure's write (fence %d after %d): %v, want fence.ErrStale", a.Fence(), b.Fence(), err)
	}
	if v, err := tg.Resource.Read(ctx, res); err != nil || v != "B2" {
		t.Fatalf("value %q (%v), want B2", v, err)
	}
}

// testHolderCheck: the holder check refuses a holder whose lease expired,
// before and after the next holder acquired, and one that released.
func testHolderCheck(t *testing.T, tg Target) {
	r, ok := tg.Resource.(HolderResource)
	if !ok {
		t.Skip("leasetest: the Resource has no holder check (HolderWrite)")
	}
	ctx := ctxT(t)
	lk := NewLocker(t, tg.Store, nil)
	// The resource is named like the lease's key (on Redis Cluster the
	// check and the write then share a hash slot).
	k := key(t, "k")
	res := k
	// The holder writes within its lease. A refusal that came back after
	// the lease's validity ended (a busy machine paused the test longer
	// than Unit) proves nothing either way: take the key again and retry.
	var a *lease.Lease
	for attempt := 1; ; attempt++ {
		var err error
		if a, err = lk.TryAcquire(ctx, k, tg.Unit); err != nil {
			t.Fatal(err)
		}
		err = r.HolderWrite(ctx, a, res, "A")
		if err == nil {
			break
		}
		if !errors.Is(err, lease.ErrNotHeld) || time.Now().Before(a.ValidUntil()) {
			t.Fatalf("the holder's write within its lease: %v", err)
		}
		if attempt == 5 {
			t.Fatalf("the holder's write came back after its lease's validity in %d attempts: %v", attempt, err)
		}
		waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	}
	// A stalls past its lease; nobody has acquired since.
	waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	if err := r.HolderWrite(ctx, a, res, "A-expired"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("write of a holder whose lease expired: %v, want lease.ErrNotHeld", err)
	}
	b, err := lk.TryAcquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.HolderWrite(ctx, a, res, "A-late"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("write of the previous holder while the next one holds: %v, want lease.ErrNotHeld", err)
	}
	if err := r.HolderWrite(ctx, b, res, "B"); err != nil {
		t.Fatalf("the next holder's write: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.HolderWrite(ctx, b, res, "B-released"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("write after release: %v, want lease.ErrNotHeld", err)
	}
	if v, err := tg.Resource.Read(ctx, res); err != nil || v != "B" {
		t.Fatalf("value %q (%v), want B", v, err)
	}
}

// testForget: after the store lost its data, a new grant's fence is still
// above every fence granted before.
func testForget(t *testing.T, tg Target) {
	if tg.Forget == nil {
		t.Skip("leasetest: the Target cannot make the store lose its data (Forget)")
	}
	ctx := ctxT(t)
	k := key(t, "k")
	var last uint64
	for i := 0; i < 3; i++ {
		tok := lease.NewToken()
		last = acquire(t, tg.Store, k, tok, 10*time.Second).Fence
		if err := tg.Store.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	s := tg.Forget(t)
	if info := inspect(t, s, k); info.Fence != 0 {
		t.Fatalf("after Forget the store still has %+v", info)
	}
	if g := acquire(t, s, k, lease.NewToken(), 10*time.Second); g.Fence <= last {
		t.Fatalf("fence %d after the data was lost, not above %d granted before", g.Fence, last)
	}
}

func testDoneBeforeStoreExpiry(t *testing.T, tg Target) {
	ctx := ctxT(t)
	for i := 0; i < 3; i++ {
		k := key(t, fmt.Sprint(i))
		l, err := NewLocker(t, tg.Store, nil).TryAcquire(ctx, k, tg.Unit)
		if err != nil {
			t.Fatal(err)
		}
		// The validity's end is where Done is scheduled to close. It must
		// come before the store frees the key. When Done's timer actually
		// fires is up to the Go scheduler, which on a loaded machine can
		// run it late, so that instant is only held to a loose bound.
		validUntil := l.ValidUntil()
		closed := make(chan time.Time, 1)
		go func() { <-l.Done(); closed <- time.Now() }()
		freeAt := waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
		if !validUntil.Before(freeAt) {
			t.Fatalf("validity ends at %v, the store freed the key at %v: the validity must end first", validUntil, freeAt)
		}
		var doneAt time.Time
		select {
		case doneAt = <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("Done did not close within 5s of the store freeing the key")
		}
		if late := doneAt.Sub(validUntil); late > time.Second {
			t.Fatalf("Done closed %v after the validity ended", late)
		} else if !doneAt.Before(freeAt) {
			t.Logf("Done's timer fired %v after the validity ended (scheduler delay), after the store freed the key", late)
		}
		if !errors.Is(l.Err(), lease.ErrLost) {
			t.Fatalf("Err() = %v, want ErrLost", l.Err())
		}
	}
}

func testDoKeepsAlive(t *testing.T, tg Target) {
	// A round in which this process went without the CPU for half a TTL
	// (seen as a gap between two of fn's looks at the store) says nothing
	// about the keep-alive, whose renewals were just as stalled; nor does
	// one whose lease was lost on a store so busy that a renewal took
	// longer than the validity it had left. Such a round is run again on
	// another key with a TTL twice as long (at most five rounds): a
	// keep-alive that does not renew fails every one of them.
	const rounds = 5
	for i := range rounds {
		if doKeepsAlive(t, tg, key(t, fmt.Sprintf("k%d", i)), tg.Unit<<i, i == rounds-1) {
			return
		}
		t.Logf("round %d: the process was stalled for over half a TTL, or the store was too slow to renew in time; running the case again with a longer TTL", i)
	}
}

// doKeepsAlive runs one round on k with a lease of ttl; false when the
// process stalled for over half a TTL while fn ran or the lease was lost,
// unless this is the last round, which fails the test instead.
func doKeepsAlive(t *testing.T, tg Target, k string, ttl time.Duration, last bool) bool {
	ctx := ctxT(t)
	var fenceSeen uint64
	var maxGap time.Duration
	err := NewLocker(t, tg.Store, nil).Do(ctx, k, ttl, func(ctx context.Context, l *lease.Lease) error {
		fenceSeen = l.Fence()
		end := time.Now().Add(4 * ttl)
		last := time.Now()
		for now := last; now.Before(end); now = time.Now() {
			maxGap, last = max(maxGap, now.Sub(last)), now
			if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != l.Fence() {
				return fmt.Errorf("lease not kept alive: %+v", info)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("fn's context ended: %v", context.Cause(ctx))
			}
			time.Sleep(ttl / 10)
		}
		return nil
	})
	if err != nil {
		if !last && (maxGap > ttl/2 || errors.Is(err, lease.ErrLost)) {
			return false
		}
		t.Fatal(err)
	}
	if info := inspect(t, tg.Direct, k); info.Held || info.Fence != fenceSeen && info.Fence != 0 {
		t.Fatalf("after Do: %+v, want released with fence %d (or 0)", info, fenceSeen)
	}
	return true
}

func testDoLoses(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	var cause error
	var cancelledBy, validUntil time.Time
	lk := NewLocker(t, tg.Store, &lease.Options{ReleaseTimeout: time.Second})
	err := lk.Do(ctx, k, tg.Unit, func(ctx context.Context, l *lease.Lease) error {
		tg.Faults.Cut()
		select {
		case <-ctx.Done():
			cancelledBy, validUntil = time.Now(), l.ValidUntil()
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(20*tg.Unit + 10*time.Second):
			return errors.New("fn's context was never cancelled")
		}
	})
	tg.Faults.Heal()
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Do: %v, want ErrLost", err)
	}
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("fn's context cause = %v, want ErrLost", cause)
	}
	// The cancellation rides on the validity timer; allow for scheduling
	// delay on a loaded machine, but not for a renewal's timeout.
	if slack := max(50*time.Millisecond, tg.Unit/4); cancelledBy.After(validUntil.Add(slack)) {
		t.Fatalf("fn's context cancelled at %v, %v after validity ended", cancelledBy, cancelledBy.Sub(validUntil))
	}
}

func testUnreachable(t *testing.T, tg Target) {
	k := key(t, "k")
	tg.Faults.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := tg.Store.Acquire(ctx, k, lease.NewToken(), time.Minute); err == nil || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire on an unreachable store: %v, want an error other than ErrHeld", err)
	}
	if _, err := tg.Store.Inspect(ctx, k); err == nil {
		t.Fatal("Inspect on an unreachable store succeeded")
	}
	if _, err := tg.Store.Renew(ctx, k, lease.NewToken(), time.Minute); err == nil || errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew on an unreachable store: %v, want an error other than ErrNotHeld", err)
	}
	tg.Faults.Heal()
	// Service resumes.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := tg.Store.Acquire(ctxT(t), k, lease.NewToken(), time.Minute)
		if err == nil {
			break
		}
		if errors.Is(err, lease.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("after Heal: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testDroppedReply(t *testing.T, tg Target) {
	k := key(t, "k")
	tok := lease.NewToken()
	tg.Faults.DropReplies()
	// The acquire waits for a reply that never comes, until it is given
	// up once its request is seen applied (a busy machine may take a
	// while to send it).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := tg.Store.Acquire(ctx, k, tok, time.Minute)
		done <- err
	}()
	var applied lease.Info
	for deadline := time.Now().Add(20 * time.Second); ; {
		if applied = inspect(t, tg.Direct, k); applied.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the acquire never applied: %+v", applied)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	err := <-done
	if err == nil || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire without reply: %v, want an error other than ErrHeld", err)
	}
	tg.Faults.Heal()
	// Retrying with the same token reconciles: the same grant, no new fence.
	var g lease.Grant
	for deadline := time.Now().Add(20 * time.Second); ; {
		g, err = tg.Store.Acquire(ctxT(t), k, tok, time.Minute)
		if err == nil {
			break
		}
		if errors.Is(err, lease.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("retry with the same token: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g.Fence != applied.Fence {
		t.Fatalf("retry granted fence %d, the applied acquire has %d", g.Fence, applied.Fence)
	}
	if err := tg.Store.Release(ctxT(t), k, tok); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, tg.Direct, k); info.Held {
		t.Fatalf("still held after release: %+v", info)
	}
}

func testCancelledAcquire(t *testing.T, tg Target) {
	k := key(t, "k")
	ttl := 60 * time.Second
	tg.Faults.DropReplies()
	// Watch the store from the start: the grant may be released (and its
	// record dropped) soon after the acquire gives up.
	seen := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			if info, err := tg.Direct.Inspect(t.Context(), k); err == nil && (info.Held || info.Fence != 0) {
				close(seen)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer close(stopWatch)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	lk := NewLocker(t, tg.Store, &lease.Options{ReleaseTimeout: 20 * time.Second})
	l, err := lk.TryAcquire(ctx, k, ttl)
	if err == nil {
		t.Fatalf("TryAcquire without reply succeeded: %v", l)
	}
	// The acquire reached the store (it granted a fence) ...
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("the acquire never reached the store")
	}
	tg.Faults.Heal()
	// ... and is released long before its TTL.
	waitFree(t, tg.Direct, k, ttl/3)
}

func testRestart(t *testing.T, tg Target) {
	ctx := ctxT(t)
	k := key(t, "k")
	held := key(t, "held")
	var max uint64
	for i := 0; i < 3; i++ {
		tok := lease.NewToken()
		g := acquire(t, tg.Store, k, tok, 10*time.Second)
		max = g.Fence
		if err := tg.Store.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	gh := acquire(t, tg.Store, held, lease.NewToken(), tg.Unit)
	s := tg.Restart(t)
	waitFree(t, s, held, 20*tg.Unit+10*time.Second)
	for _, c := range []struct {
		k    string
		last uint64
	}{{k, max}, {held, gh.Fence}} {
		var g lease.Grant
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			g, err = s.Acquire(ctx, c.k, lease.NewToken(), 10*time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("acquire after restart: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if g.Fence <= c.last {
			t.Fatalf("fence %d after restart not above %d granted before", g.Fence, c.last)
		}
	}
}

// NewLocker returns NewLocker(t, s, o), failing t if the options are refused.
func NewLocker(t testing.TB, s lease.Store, o *lease.Options) *lease.Locker {
	t.Helper()
	lk, err := lease.New(s, o)
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	return lk
}
