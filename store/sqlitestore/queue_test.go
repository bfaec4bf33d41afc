package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// tickClock is a store clock that moves one microsecond at every read,
// so the fence of a new key (the clock in µs) tells when the store
// applied the write.
type tickClock struct{ us atomic.Int64 }

func newTickClock() *tickClock {
	c := &tickClock{}
	c.us.Store(1_800_000_000_000_000)
	return c
}

func (c *tickClock) Now() time.Time { return time.UnixMicro(c.us.Add(1)) }

// waitWaiters waits until n writers wait in the store's write queue.
func waitWaiters(t *testing.T, s *sqlitestore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.WriteWaiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d writers in the queue (%d)", n, s.WriteWaiters())
		}
		time.Sleep(time.Millisecond)
	}
}

// A transaction of the caller's, begun on the store's database while the
// store's own writes keep coming, takes its turn in arrival order: it sees
// the writes that came before it and none of those that came after.
// (Waiting in SQLite's busy handler instead, it was overtaken by every
// store write that came after it, until its context ended.)
func TestCallerTransactionTakesItsTurn(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: newTickClock().Now})
	ls := s.Leases()
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	fences := make([]uint64, 6)
	acquire := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := ls.Acquire(ctx, fmt.Sprintf("k%d", i), lease.NewToken(), time.Minute)
			if err != nil {
				t.Errorf("acquire %d: %v", i, err)
			}
			fences[i] = g.Fence
		}()
	}
	acquire(0)
	waitWaiters(t, s, 1)
	var seen uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Errorf("caller's BeginTx: %v", err)
			return
		}
		defer tx.Rollback()
		var f int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(fence), 0) FROM tenure_leases`).Scan(&f); err != nil {
			t.Errorf("caller's read: %v", err)
			return
		}
		seen = uint64(f)
		if err := tx.Commit(); err != nil {
			t.Errorf("caller's commit: %v", err)
		}
	}()
	waitWaiters(t, s, 2)
	for i := 1; i < len(fences); i++ {
		acquire(i)
		waitWaiters(t, s, 2+i)
	}
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if seen != fences[0] {
		t.Fatalf("the caller's transaction saw fence %d; want %d, the grant before it (grants after it: %v)", seen, fences[0], fences[1:])
	}
}

// The renewal of a held lease goes ahead of new work waiting for the
// write lock: its deadline is the lease's validity.
func TestRenewalGoesAhead(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: newTickClock().Now})
	ls := s.Leases()
	tok := lease.NewToken()
	if _, err := ls.Acquire(ctx, "held", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var newFence uint64
	wg.Add(2)
	go func() {
		defer wg.Done()
		g, err := ls.Acquire(ctx, "new", lease.NewToken(), time.Minute)
		if err != nil {
			t.Errorf("acquire: %v", err)
		}
		newFence = g.Fence
	}()
	waitWaiters(t, s, 1)
	go func() {
		defer wg.Done()
		if _, err := ls.Renew(ctx, "held", tok, time.Minute); err != nil {
			t.Errorf("renew: %v", err)
		}
	}()
	waitWaiters(t, s, 2)
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var exp int64
	if err := s.DB().QueryRowContext(ctx, `SELECT expires_us FROM tenure_leases WHERE "key" = 'held'`).Scan(&exp); err != nil {
		t.Fatal(err)
	}
	if renewedAt := uint64(exp - time.Minute.Microseconds()); renewedAt > newFence {
		t.Fatalf("the renewal was applied at %d, after the acquisition that came before it (%d)", renewedAt, newFence)
	}
}

// A key another token holds is refused without the write lock: a waiter
// polling it does not queue behind the writers.
func TestHeldKeyRefusedWithoutTheLock(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	ls := s.Leases()
	if _, err := ls.Acquire(ctx, "k", lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	// The write lock is taken until the end of the test: a refusal that
	// needed it would wait for it until this context ends.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = ls.Acquire(cctx, "k", lease.NewToken(), time.Minute)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.TTL <= 0 {
		t.Fatalf("acquire of a held key while the write lock is taken: %v, want a HeldError", err)
	}
}

// A grant counts its ttl from when the store applied it: the time the
// request waited for the write lock is added to the ttl it reports, so a
// holder whose validity runs from its send time loses none of it.
func TestGrantReportsItsWait(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g    lease.Grant
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		g, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
		done <- result{g, err, time.Since(start)}
	}()
	waitWaiters(t, s, 1)
	queued := time.Now()              // the request entered the store before this
	time.Sleep(20 * time.Millisecond) // a wait long enough to be seen in the TTL
	waited := time.Since(queued)
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if extra := r.g.TTL - time.Minute; extra < waited || extra > r.took {
		t.Fatalf("granted TTL %v: %v on top of the minute asked, want between the %v it was seen waiting and the %v the call took", r.g.TTL, extra, waited, r.took)
	}
}

// A transaction left open holds the write lock: a writer waiting behind it
// gives up once the lock has not changed hands for the busy timeout (5s),
// with an error wrapping lease.ErrUnavailable, as SQLite's busy handler
// would; nothing is written.
func TestStuckTransactionTimesOut(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	_, err = s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "database is locked") {
		t.Fatalf("acquire behind a transaction left open: %v, want ErrUnavailable (database is locked)", err)
	}
	hold.Rollback()
	if info, err := s.Leases().Inspect(ctx, "k"); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("after the refused acquire: %+v, %v; want nothing written", info, err)
	}
}
