package leasetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// aheadBy is how far Raise puts a fence ahead of the one granted: an hour
// of a clock in microseconds, far beyond anything a grant made at the
// store's real clock reaches in a test.
const aheadBy = uint64(time.Hour / time.Microsecond)

func needEnded(t *testing.T, tg Target) *Ended {
	t.Helper()
	if tg.Ended == nil || tg.Ended.Reclaim == nil || tg.Ended.Keys == nil {
		t.Skip("leasetest: the Target does not reach what the store keeps of ended leases (Ended)")
	}
	return tg.Ended
}

// testEndedLeaveNoState: once leases have ended (released, expired, or
// abandoned by a waiter that left) and the store has reclaimed them, it
// keeps nothing for their keys, while a held lease keeps its record.
func testEndedLeaveNoState(t *testing.T, tg Target) {
	e := needEnded(t, tg)
	ctx := ctxT(t)
	p := key(t, "")
	const released, expired = 40, 10
	var short []string
	for i := 0; i < released+expired; i++ {
		k := fmt.Sprintf("%sk%03d", p, i)
		tok := lease.NewToken()
		if i < released {
			acquire(t, tg.Store, k, tok, 10*time.Second)
			if err := tg.Store.Release(ctx, k, tok); err != nil {
				t.Fatalf("Release(%q): %v", k, err)
			}
			continue
		}
		acquire(t, tg.Store, k, tok, tg.Unit)
		short = append(short, k)
	}
	// A key with waiters: one leaves, one crashes (its stay runs out).
	waited := p + "waited"
	holderTok := lease.NewToken()
	acquire(t, tg.Store, waited, holderTok, 10*time.Second)
	if q, ok := tg.Store.(leasedriver.Queuer); ok {
		left, crashed := lease.NewToken(), lease.NewToken()
		_, err := q.AcquireQueued(ctx, waited, left, 10*time.Second, "", 10*time.Second)
		queued(t, err, "the waiter that leaves", 0)
		_, err = q.AcquireQueued(ctx, waited, crashed, 10*time.Second, "", tg.Unit)
		queued(t, err, "the waiter that crashes", 1)
		if err := q.Leave(ctx, waited, left); err != nil {
			t.Fatalf("Leave: %v", err)
		}
	}
	if err := tg.Store.Release(ctx, waited, holderTok); err != nil {
		t.Fatalf("Release(%q): %v", waited, err)
	}
	held := p + "held"
	acquire(t, tg.Store, held, lease.NewToken(), time.Minute)
	if got := e.Keys(t, p); !slices.Contains(got, held) || len(got) < 2 {
		t.Fatalf("before reclaiming, the store keeps records for %d keys (%q...), want the held one and those that just ended", len(got), first(got))
	}
	for _, k := range short {
		waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
	}
	// The crashed waiter's place is not visible through Inspect: reclaim
	// until it is gone too (its stay is one Unit).
	for deadline := time.Now().Add(10*tg.Unit + 5*time.Second); ; {
		e.Reclaim(t)
		got := e.Keys(t, p)
		if slices.Equal(got, []string{held}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d leases ended and were reclaimed the store keeps records for %d keys (%q...), want only the held %q", released+expired+1, len(got), first(got), held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info := inspect(t, tg.Direct, held); !info.Held || info.Fence == 0 {
		t.Fatalf("the held lease after reclaiming: %+v", info)
	}
	for i := range released + expired {
		k := fmt.Sprintf("%sk%03d", p, i)
		if info := inspect(t, tg.Direct, k); info.Held || info.Fence != 0 {
			t.Fatalf("a reclaimed key still reads %+v", info)
		}
	}
}

func first(keys []string) []string { return keys[:min(len(keys), 3)] }

// testFenceAboveReclaimed: a key whose record the store reclaimed is
// granted a fence above every fence it had, even one far ahead of the
// store's clock (a clock that stepped back since): the store keeps a floor
// that does not grow with the keys.
func testFenceAboveReclaimed(t *testing.T, tg Target) {
	e := needEnded(t, tg)
	ctx := ctxT(t)
	for _, end := range []string{"released", "expired"} {
		k := key(t, end)
		tok := lease.NewToken()
		ttl := 10 * time.Second
		if end == "expired" {
			ttl = tg.Unit
		}
		last := acquire(t, tg.Store, k, tok, ttl).Fence
		if e.Raise != nil {
			last += aheadBy
			e.Raise(t, k, last)
			if info := inspect(t, tg.Direct, k); info.Fence != last {
				t.Fatalf("%s: after Raise the store reports fence %d, want %d", end, info.Fence, last)
			}
		}
		if end == "released" {
			if err := tg.Store.Release(ctx, k, tok); err != nil {
				t.Fatalf("Release: %v", err)
			}
		} else {
			waitFree(t, tg.Direct, k, 10*tg.Unit+5*time.Second)
		}
		e.Reclaim(t)
		if got := e.Keys(t, k); len(got) != 0 {
			t.Fatalf("%s: the store still keeps %q after reclaiming", end, got)
		}
		g := acquire(t, tg.Store, k, lease.NewToken(), 10*time.Second)
		if g.Fence <= last {
			t.Fatalf("%s: fence %d granted after the key's record was reclaimed, not above %d granted before", end, g.Fence, last)
		}
		if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != g.Fence {
			t.Fatalf("%s: after the new grant the store reads %+v, want held with fence %d", end, info, g.Fence)
		}
	}
}

// testReclaimMidGrant: a grant that read what a grant reads before the
// store reclaimed the key's record, and writes after it, still gets a
// fence above every fence the key had (a sweep that runs while a grant is
// under way must not let it write a fence it read too early), through a
// plain acquire and, where the store queues waiters, a queued one.
func testReclaimMidGrant(t *testing.T, tg Target) {
	e := needEnded(t, tg)
	if e.Stall == nil || e.Raise == nil {
		t.Skip("leasetest: no grant of this store can be stopped between its read and its write (Ended.Stall), or its fences do not come from a clock (Ended.Raise)")
	}
	ctx := ctxT(t)
	ways := []string{"acquire"}
	if _, ok := tg.Store.(leasedriver.Queuer); ok {
		ways = append(ways, "queued")
	}
	for _, way := range ways {
		k := key(t, way)
		tok := lease.NewToken()
		last := acquire(t, tg.Store, k, tok, 10*time.Second).Fence + aheadBy
		e.Raise(t, k, last)
		if err := tg.Store.Release(ctx, k, tok); err != nil {
			t.Fatalf("%s: Release: %v", way, err)
		}
		stalled, resume := e.Stall(t, k)
		type result struct {
			g   lease.Grant
			err error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			if way == "queued" {
				r.g, r.err = tg.Store.(leasedriver.Queuer).AcquireQueued(ctx, k, lease.NewToken(), 10*time.Second, "", 10*time.Second)
			} else {
				r.g, r.err = tg.Store.Acquire(ctx, k, lease.NewToken(), 10*time.Second)
			}
			done <- r
		}()
		for deadline := time.Now().Add(30 * time.Second); !stalled(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				resume()
				t.Fatalf("%s: the grant did not stop between its read and its write within 30s", way)
			}
		}
		e.Reclaim(t)
		if got := e.Keys(t, k); len(got) != 0 {
			resume()
			t.Fatalf("%s: the store still keeps %q after reclaiming, with a grant stopped before its write", way, got)
		}
		resume()
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the grant did not return within 30s of being resumed", way)
		}
		if r.err != nil || r.g.Fence <= last {
			t.Fatalf("%s: a grant that read before the key's record was reclaimed and wrote after got fence %d (%v), not above %d the key had", way, r.g.Fence, r.err, last)
		}
		if info := inspect(t, tg.Direct, k); !info.Held || info.Fence != r.g.Fence {
			t.Fatalf("%s: after the grant the store reads %+v, want held with fence %d", way, info, r.g.Fence)
		}
	}
}
