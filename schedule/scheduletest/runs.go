package scheduletest

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// The cases of this file check how a slot's run is put together: a claim
// lost under the handler, a run lease left by a dead or finished attempt,
// catch-up next to on-time slots, and a panicking handler. Each asserts
// the records and the leases on the store.

// held reports whether key is held on the store's lease view.
func (e *env) held(key string) bool {
	e.t.Helper()
	info, err := e.Store.Claims().Inspect(ctxT(e.t), key)
	if err != nil {
		e.t.Fatalf("Inspect(%s): %v", key, err)
	}
	return info.Held
}

// released waits up to within (real time) for key to be free, and fails
// the test if it is still held then.
func (e *env) released(key string, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for e.held(key) {
		if time.Now().After(deadline) {
			e.t.Errorf("%s is still held %v after the panic", key, within)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// handLocker is a Locker on the store's lease view, for leases a test
// takes by hand (those of a node that died, say).
func (e *env) handLocker() *lease.Locker {
	e.t.Helper()
	lk, err := lease.New(e.Store.Claims(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return lk
}

// A completion refused as stale (the claim ran out on the store's clock
// before the keep-alive noticed) is a lost claim, not a handler failure:
// the slot runs again at once, even with one attempt allowed.
func testStaleCompletionRetried(e *env) {
	t := e.t
	job := jobName(t, "stale")
	every := schedule.Every(time.Minute)
	sched := window(every, t0, t0)
	var calls counter
	j := schedule.Job{Name: job, Schedule: sched, Run: func(ctx context.Context, s *schedule.Slot) error {
		calls.add(s.ID)
		if s.Attempt == 1 {
			// Paused past the claim inside the handler.
			e.Clock.Advance(e.claimTTL() + time.Millisecond)
		}
		return e.Complete(ctx, s)
	}}
	e.Clock.Set(t0.Add(-time.Second))
	e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(t0)
	e.settle(job, sched, t0)
	r, _ := e.record(job, sched.ID(t0))
	if r.State != schedule.Done || r.Attempts != 2 || calls.get(sched.ID(t0)) != 2 {
		t.Fatalf("record %+v after %d calls; want done at attempt 2 (the first one's claim ran out)", r, calls.get(sched.ID(t0)))
	}
	if n := e.count(job); n != 1 {
		t.Fatalf("business counter = %d, want 1", n)
	}
}

// A dead node's run lease outlives its claim: the node that takes the
// slot over waits for the run lease and runs the slot; it does not record
// it skipped.
func testTakeoverWaitsForRunLease(e *env) {
	t := e.t
	job := jobName(t, "takeover")
	sched := window(schedule.Every(time.Hour), t0, t0)
	e.Clock.Set(t0)
	// Node a claims the slot, begins it and takes the run lease a minute
	// later, then dies.
	_, dead := e.claimOne(e.Store, job, sched, t0, "a")
	e.Clock.Advance(time.Minute)
	if _, err := e.handLocker().TryAcquire(ctxT(t), scheddriver.RunKey(job), e.claimTTL()); err != nil {
		t.Fatal(err)
	}
	var calls counter
	e.start(e.node(), e.opts("b"), schedule.Job{Name: job, Schedule: sched, Run: e.completing(&calls)})
	// The claim ends; the run lease still has a minute.
	e.Clock.Advance(e.claimTTL() - time.Minute + time.Millisecond)
	e.waitFor("b to take the claim over", func() bool {
		if r, _ := e.record(job, dead.ID); r.Final() {
			return true
		}
		info, err := e.Store.Claims().Inspect(ctxT(t), scheddriver.ClaimKey(job, dead.ID))
		return err == nil && info.Held && info.Fence > dead.Fence
	})
	time.Sleep(20 * time.Millisecond) // some ten polls of b
	if r, _ := e.record(job, dead.ID); r.State != schedule.Running || r.Node != "a" {
		t.Fatalf("record %+v while the dead run lease is held; want a's running attempt", r)
	}
	e.Clock.Advance(time.Minute)
	r := e.waitState(job, dead.ID, schedule.Done)
	if r.Node != "b" || r.Attempts != 2 || r.Fence <= dead.Fence || calls.get(dead.ID) != 1 || e.count(job) != 1 {
		t.Fatalf("record %+v, %d calls, counter %d; want b's second attempt, once", r, calls.get(dead.ID), e.count(job))
	}
}

// The run lease held by an attempt at a slot that is already done (a node
// that lost the claim race and took the slot later) does not make the
// next on-time slot skipped; and a node that finds its slot done after
// taking the claim does not take the run lease at all.
func testSettledSlotNoSkip(e *env) {
	t := e.t
	job := jobName(t, "settled")
	every := schedule.Every(time.Minute)
	sched := window(every, t0, t0.Add(time.Minute))
	next := t0.Add(time.Minute)
	var calls counter
	j := schedule.Job{Name: job, Schedule: sched, Run: e.completing(&calls)}
	e.Clock.Set(t0.Add(-time.Second))
	e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(t0)
	e.waitState(job, sched.ID(t0), schedule.Done)
	// a releases its run lease once the record is written; then a run lease
	// is taken as by a node that ran slot t0 late, after it was done.
	e.waitFor("a's run lease to be released", func() bool { return !e.held(scheddriver.RunKey(job)) })
	run, err := e.handLocker().TryAcquire(ctxT(t), scheddriver.RunKey(job), e.claimTTL())
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(next)
	e.waitFor("a to claim the next slot", func() bool {
		if r, ok := e.record(job, sched.ID(next)); ok && r.Final() {
			return true
		}
		return e.held(scheddriver.ClaimKey(job, sched.ID(next)))
	})
	time.Sleep(20 * time.Millisecond)
	if r, ok := e.record(job, sched.ID(next)); ok {
		t.Fatalf("record %+v while the run lease of a finished run is held; want none yet", r)
	}
	if err := run.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r := e.waitState(job, sched.ID(next), schedule.Done)
	if r.Attempts != 1 || e.count(job) != 2 {
		t.Fatalf("record %+v, counter %d; want done once", r, e.count(job))
	}

	// A node whose claim attempt lost, retrying once the slot is done.
	job2 := jobName(t, "settled2")
	at := t0.Add(2 * time.Minute)
	one := window(every, at, at)
	e.Clock.Set(at.Add(-time.Second))
	x, slot := e.claimOneAt(job2, one, at)
	counting := &countingStore{Store: e.node()}
	b := e.start(counting, e.opts("b"), schedule.Job{Name: job2, Schedule: one, Run: e.completing(&calls)})
	e.waitFor("b to find the slot claimed", func() bool { return counting.claims.Load() >= 1 })
	if err := e.Complete(ctxT(t), slot); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Finish(ctxT(t), slot, nil); err != nil {
		t.Fatal(err)
	}
	// b looks at the slot again once x's claim would have ended: it reads
	// the record (before claiming, or after), finds it done and drops it.
	// Stopping b waits for that attempt to end, so every lease it took is
	// counted by then.
	reads := counting.reads.Load()
	e.Clock.Advance(e.claimTTL() + time.Millisecond)
	e.waitFor("b to read the slot's record again", func() bool { return counting.reads.Load() > reads })
	b.stop()
	if n := counting.runs.Load(); n != 0 {
		t.Fatalf("b took the run lease %d times for a slot that was done", n)
	}
	if r, _ := e.record(job2, slot.ID); r.State != schedule.Done || r.Attempts != 1 || r.Node != "x" {
		t.Fatalf("record %+v, want x's single attempt", r)
	}
}

// claimOneAt claims slot at of job on a scheduler "x" that is not running.
func (e *env) claimOneAt(job string, sched schedule.Schedule, at time.Time) (*schedule.Scheduler, *schedule.Slot) {
	e.t.Helper()
	e.Clock.Set(at)
	return e.claimOne(e.Store, job, sched, at, "x")
}

// countingStore counts the claim and run-lease acquisitions made through
// its lease view, and the reads of slot records.
type countingStore struct {
	schedule.Store
	claims, runs, reads atomic.Int32
}

// Slot counts a read of a slot's record once the store has answered it.
func (c *countingStore) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	r, err := c.Store.Slot(ctx, job, id)
	c.reads.Add(1)
	return r, err
}

func (c *countingStore) Claims() lease.Store { return countingLeases{c.Store.Claims(), c} }

type countingLeases struct {
	lease.Store
	c *countingStore
}

// Acquire counts a call once the store has answered it.
func (l countingLeases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	g, err := l.Store.Acquire(ctx, key, token, ttl)
	switch {
	case strings.Contains(key, "/slot/"):
		l.c.claims.Add(1)
	case strings.HasSuffix(key, "/run"):
		l.c.runs.Add(1)
	}
	return g, err
}

// Catch-up under the default overlap policy: every late slot runs, oldest
// first, also while an on-time slot of the same job holds the run lease.
func testCatchUpDefaultOverlap(e *env) {
	t := e.t
	job := jobName(t, "catchup-skip")
	sched := schedule.Every(time.Minute)
	slot := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	var (
		mu      sync.Mutex
		order   []time.Time
		onTime  atomic.Bool
		release = make(chan struct{})
	)
	j := schedule.Job{Name: job, Schedule: sched, Misfire: schedule.MisfireCatchUp, MisfireThreshold: 30 * time.Second,
		CatchUpWindow: time.Hour,
		Run: func(ctx context.Context, s *schedule.Slot) error {
			if s.Time.Equal(slot(6)) {
				onTime.Store(true)
				<-release
			} else {
				mu.Lock()
				order = append(order, s.Time)
				mu.Unlock()
			}
			return e.Complete(ctx, s)
		}}
	e.Clock.Set(slot(0).Add(-time.Second))
	a := e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(slot(0))
	e.waitState(job, sched.ID(slot(0)), schedule.Done)
	a.stop()
	// Slots 1 to 5 are late, slot 6 is on time.
	e.Clock.Set(slot(6).Add(10 * time.Second))
	e.start(e.node(), e.opts("b"), j)
	e.waitFor("the on-time slot to start or end", func() bool {
		r, ok := e.record(job, sched.ID(slot(6)))
		return onTime.Load() || (ok && r.Final())
	})
	time.Sleep(20 * time.Millisecond)
	close(release)
	var all []time.Time
	for i := range 7 {
		all = append(all, slot(i))
	}
	e.settle(job, sched, all...)
	for _, r := range e.records(job) {
		if r.State != schedule.Done {
			t.Errorf("slot %s is %s (%s), want done", r.SlotID, r.State, r.Error)
		}
	}
	if n := e.count(job); n != 7 {
		t.Fatalf("business counter = %d, want 7", n)
	}
	mu.Lock()
	defer mu.Unlock()
	late := slices.DeleteFunc(slices.Clone(order), func(at time.Time) bool { return at.Equal(slot(0)) })
	if len(late) != 5 || !slices.IsSortedFunc(late, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Fatalf("late slots ran in the order %v; want 1 to 5, oldest first", late)
	}
}

// A panicking handler fails its slot (the panic value in the record) and
// leaves no claim, run lease or catch-up permit held; the scheduler goes
// on with the next slot.
func testPanickingHandler(e *env) {
	if !e.fake() {
		e.panicOnRealClock()
		return
	}
	t := e.t
	job := jobName(t, "panic")
	sched := schedule.Every(time.Minute)
	slot := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	j := schedule.Job{Name: job, Schedule: sched, Misfire: schedule.MisfireCatchUp, MisfireThreshold: 30 * time.Second,
		CatchUpWindow: time.Hour,
		Run: func(ctx context.Context, s *schedule.Slot) error {
			if s.Time.Equal(slot(1)) {
				panic("boom in " + s.ID)
			}
			return e.Complete(ctx, s)
		}}
	e.Clock.Set(slot(0).Add(-time.Second))
	a := e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(slot(0))
	e.waitState(job, sched.ID(slot(0)), schedule.Done)
	a.stop()
	// Slots 1 and 2 are late: slot 1 runs with a catch-up permit and the
	// run lease, and panics.
	e.Clock.Set(slot(2).Add(45 * time.Second))
	e.start(e.node(), e.opts("b"), j)
	e.settle(job, sched, slot(1), slot(2))
	r, _ := e.record(job, sched.ID(slot(1)))
	if r.State != schedule.Failed || !r.Final() || r.Attempts != 1 || !strings.Contains(r.Error, "boom in "+sched.ID(slot(1))) {
		t.Fatalf("panicked slot: %+v; want failed for good with the panic value", r)
	}
	for _, key := range []string{scheddriver.ClaimKey(job, sched.ID(slot(1))), scheddriver.RunKey(job), scheddriver.PermitKey(job, 0)} {
		e.released(key, 5*time.Second)
	}
	// Still running: the next slots are done.
	e.Clock.Set(slot(3))
	e.settle(job, sched, slot(2), slot(3))
	for _, i := range []int{2, 3} {
		if r, _ := e.record(job, sched.ID(slot(i))); r.State != schedule.Done {
			t.Errorf("slot %d after the panic: %+v", i, r)
		}
	}
	if n := e.count(job); n != 3 {
		t.Fatalf("business counter = %d, want 3", n)
	}
}

// panicOnRealClock is the panic case on the store's own clock: two slots
// well apart, the first one's handler panics.
func (e *env) panicOnRealClock() {
	t := e.t
	job := jobName(t, "panic")
	every := schedule.Every(e.Unit)
	first := every.Next(e.now().Add(500 * time.Millisecond)) // after the first poll
	sched := listed{every, []time.Time{first, every.Next(first.Add(8 * e.Unit))}}
	second := sched.ats[1]
	var lg logs
	o := e.opts("a")
	if o.Logger == nil {
		o.Logger = slog.New(&lg)
	}
	e.start(e.node(), o, schedule.Job{Name: job, Schedule: sched, Run: func(ctx context.Context, s *schedule.Slot) error {
		if s.Time.Equal(first) {
			panic("boom in " + s.ID)
		}
		return e.Complete(ctx, s)
	}})
	r := e.waitState(job, sched.ID(first), schedule.Failed, func() string {
		return "node a logged: " + strings.Join(lg.all(), " | ")
	})
	if !r.Final() || r.Attempts != 1 || !strings.Contains(r.Error, "boom in "+sched.ID(first)) {
		t.Fatalf("panicked slot: %+v; want failed for good with the panic value", r)
	}
	// The record says failed a moment before the claim is released (the
	// claim's fence proves the record's writer); both happen well within
	// the claim's TTL, so a lease still held past half of it was kept
	// alive, not released.
	for _, key := range []string{scheddriver.ClaimKey(job, sched.ID(first)), scheddriver.RunKey(job)} {
		e.released(key, e.claimTTL()/2)
	}
	if r := e.waitState(job, sched.ID(second), schedule.Done); r.Attempts != 1 || e.count(job) != 1 {
		t.Fatalf("next slot %+v, counter %d; want done once", r, e.count(job))
	}
}

// listed is a schedule with the given slots only.
type listed struct {
	schedule.Schedule
	ats []time.Time
}

func (l listed) Next(t time.Time) time.Time {
	for _, at := range l.ats {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// A slot that came due while the nodes that knew of it died before any
// of them began it, and a later slot that one of them ran: a node that
// starts afterwards runs the forgotten slot (it is due and has no record)
// although a later slot is recorded.
func testUnrecordedSlot(e *env) {
	t, ctx := e.t, ctxT(e.t)
	job := jobName(t, "forgotten")
	sched := schedule.Every(time.Minute)
	slot := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	var calls counter
	j := schedule.Job{Name: job, Schedule: sched, MisfireThreshold: 10 * time.Minute, Overlap: schedule.OverlapAllow, Run: e.completing(&calls)}
	e.Clock.Set(slot(0).Add(-time.Second))
	a := e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(slot(0))
	e.waitState(job, sched.ID(slot(0)), schedule.Done)
	a.stop()
	// Slot 1 is due with no node up; slot 2 is run by a node ("x") that
	// then dies, never having begun slot 1.
	x := e.newScheduler(e.Store, e.opts("x"))
	if err := x.Add(j); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(slot(2))
	s2, err := x.Claim(ctx, job, slot(2))
	if err != nil {
		t.Fatalf("x's claim of slot 2: %v", err)
	}
	if err := e.Complete(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Finish(ctx, s2, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.record(job, sched.ID(slot(1))); ok {
		t.Fatal("slot 1 has a record before any node ran it")
	}
	e.Clock.Set(slot(2).Add(30 * time.Second))
	e.start(e.node(), e.opts("b"), j)
	r := e.waitState(job, sched.ID(slot(1)), schedule.Done)
	if r.Node != "b" || r.Attempts != 1 || calls.get(sched.ID(slot(1))) != 1 {
		t.Fatalf("slot 1: %+v, %d calls; want run once by b", r, calls.get(sched.ID(slot(1))))
	}
	if r2, _ := e.record(job, sched.ID(slot(2))); r2.State != schedule.Done || r2.Node != "x" || r2.Attempts != 1 {
		t.Fatalf("slot 2: %+v, want x's single attempt", r2)
	}
	if n := e.count(job); n != 3 {
		t.Fatalf("business counter %d, want 3 (slots 0, 1, 2 once each)", n)
	}
}
