package memstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

type sweepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *sweepClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *sweepClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

func sweepID(i int) session.ID {
	sum := sha256.Sum256(fmt.Appendf(nil, "sweep %d", i))
	return session.ID("0000" + hex.EncodeToString(sum[:]))
}

// retained counts what the session view keeps: records, per-user index
// entries and pending sweep entries.
func retained(st *sessionState) (recs, index, queue int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, idx := range st.users {
		index += len(idx)
	}
	return len(st.recs), index, len(st.sweep) - st.head
}

// Clients that create sessions and never come back do not grow the store
// without bound: writes release expired records (and their index entries)
// at the rate they come.
func TestSessionSweepReleasesExpired(t *testing.T) {
	ctx := context.Background()
	clock := &sweepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ms, err := New(&Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	v, st := ms.Sessions(), ms.sessionState()
	const batch = 1000
	n := 0
	create := func(user string) {
		t.Helper()
		if _, err := v.Create(ctx, session.Record{ID: sweepID(n), UserID: user}, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
		n++
	}
	// One batch from many users, one from a single user.
	for i := range batch {
		create(fmt.Sprintf("user-%d", i))
	}
	for range batch {
		create("one")
	}
	for round := range 5 {
		clock.Advance(2 * time.Minute) // every session so far is past its idle deadline
		for i := range 2 * batch {
			create(fmt.Sprintf("r%d-user-%d", round, i%100))
		}
		recs, index, queue := retained(st)
		// The live batch, plus what the sweep has not reached yet: at most
		// a small part of one batch.
		if recs > 2*batch+batch/10 || index != recs || queue > 2*recs+64 {
			t.Fatalf("round %d: %d records, %d index entries, %d queued; want about %d live records",
				round, recs, index, queue, 2*batch)
		}
	}
	// Only the last round's sessions are live, and all still load.
	for i := n - 2*batch; i < n; i++ {
		if _, err := v.Load(ctx, sweepID(i), time.Minute); err != nil {
			t.Fatalf("a live session was swept: %v", err)
		}
	}
	// A live session under constant use is never swept, and rotations do
	// not grow the queue.
	clock.Advance(2 * time.Minute)
	id := sweepID(n)
	create("rotating")
	ver := uint64(1)
	for i := range 10 * batch {
		next := sweepID(n + 1 + i)
		rec, err := v.Rotate(ctx, id, next, ver, nil, time.Minute)
		if err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
		id, ver = next, rec.Version
		clock.Advance(100 * time.Millisecond)
	}
	recs, index, queue := retained(st)
	if recs != 1 || index != 1 || queue > 4 {
		t.Fatalf("after rotations: %d records, %d index entries, %d queued; want 1, 1, a few", recs, index, queue)
	}
	if l, err := v.List(ctx, "rotating"); err != nil || len(l) != 1 || l[0].ID != id {
		t.Fatalf("List after rotations: %+v, %v", l, err)
	}
	if st.head > 64 || cap(st.sweep) > 1024 {
		t.Fatalf("the sweep queue's array grew to %d (head %d)", cap(st.sweep), st.head)
	}
}

// Loads of live sessions alone (no creates) also release expired ones.
func TestSessionSweepOnLoad(t *testing.T) {
	ctx := context.Background()
	clock := &sweepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ms, err := New(&Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	v, st := ms.Sessions(), ms.sessionState()
	if _, err := v.Create(ctx, session.Record{ID: sweepID(0), UserID: "live"}, time.Hour, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 500; i++ {
		if _, err := v.Create(ctx, session.Record{ID: sweepID(i), UserID: "gone"}, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	for range 500 {
		if _, err := v.Load(ctx, sweepID(0), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if recs, index, _ := retained(st); recs != 1 || index != 1 {
		t.Fatalf("%d records, %d index entries; want only the live one", recs, index)
	}
}
