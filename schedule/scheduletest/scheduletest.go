// Package scheduletest is the conformance suite every schedule.Store must
// pass, run through the real Scheduler.
//
// Each store's tests call [Run] with a function that returns a [Target]:
// the store under test, more views of the same data (other nodes), a
// business effect completed together with the slot's fenced completion,
// and, for stores whose clock can be injected, a fake [Clock]. The cases
// that need to move the store's clock (misfire, overlap, DST) are run only
// for targets with a Clock (Run logs that it leaves them out otherwise);
// the others run everywhere, on the store's own clock with short real
// intervals.
package scheduletest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the DST cases need these zones whatever the machine has

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Target is one store under test.
type Target struct {
	// Store is the store under test.
	Store schedule.Store
	// Node returns another view of the same data, as another node would
	// have it (its own client or connection). Default: Store.
	Node func(t *testing.T) schedule.Store
	// Complete applies the business effect of a slot (adds 1 to the
	// counter of slot.Job) together with the store's fenced completion of
	// the slot, in one atomic step: a transaction with CompleteSlot on the
	// SQL stores, CompleteSlot with an add effect on Redis and memory. On
	// refusal it returns the completion's error and applies nothing.
	// Required.
	Complete func(ctx context.Context, slot *schedule.Slot) error
	// Count returns the business counter of job. Required.
	Count func(ctx context.Context, job string) (int64, error)
	// Clock, if set, is the store's clock: the cases that move time run
	// only then.
	Clock *Clock
	// Unit is the interval of the real-clock cases' Every schedules.
	// Default 25ms.
	Unit time.Duration
	// Retained, if set, reaches what the store keeps of slots, for the
	// case that checks final slot records go after the schedule retention
	// with their ledger rows and attempt histories
	// (SlotRecordsGoAfterRetention; skipped when nil).
	Retained *Retained
}

type env struct {
	Target
	t *testing.T
}

// Run runs the conformance suite. newTarget is called once per subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		fn   func(e *env)
		fake bool // needs Target.Clock
	}{
		{"InvalidInputWritesNothing", testInvalid, false},
		{"RecordContract", testRecordContract, false},
		{"CompleteOnceUnderConcurrency", testCompleteOnce, false},
		{"PausedPastClaimLateCommitRefused", testPausedPastClaim, false},
		{"KilledBetweenCommitAndBookkeeping", testKilledBetween, false},
		{"DeadNodeSlotRerunElsewhere", testDeadNode, false},
		{"ThreeSchedulers200Slots", testThreeSchedulers, false},
		{"SkewedNodeClocksNoDuplicate", testSkewedClocks, false},
		{"RetryAfterFailure", testRetry, false},
		{"GracefulStop", testGracefulStop, false},
		{"MisfirePolicies", testMisfire, true},
		{"CatchUpConcurrencyAcrossNodes", testCatchUpConcurrency, true},
		{"OverlapPolicies", testOverlap, true},
		{"DST", testDST, true},
		{"StaleCompletionRetried", testStaleCompletionRetried, true},
		{"TakeoverWaitsForRunLease", testTakeoverWaitsForRunLease, true},
		{"SettledSlotNoSkip", testSettledSlotNoSkip, true},
		{"CatchUpDefaultOverlap", testCatchUpDefaultOverlap, true},
		{"UnrecordedSlotNotForgotten", testUnrecordedSlot, true},
		{"PanickingHandler", testPanickingHandler, false},
		{"DefinitionContract", testDefinitionContract, false},
		{"AttemptHistory", testAttemptHistory, false},
		{"DisagreeingNodes", testDisagreeingNodes, false},
		{"SlotRecordsGoAfterRetention", testRecordsGoAfterRetention, false},
	}
	// The cases that move the store's clock apply only to targets whose
	// clock the suite controls; Run leaves them out elsewhere (and logs it).
	movable := newTarget(t).Clock != nil
	if !movable {
		t.Logf("scheduletest: the store's clock cannot be moved by the test; MisfirePolicies, CatchUpConcurrencyAcrossNodes, OverlapPolicies, DST, StaleCompletionRetried, TakeoverWaitsForRunLease, SettledSlotNoSkip, CatchUpDefaultOverlap and UnrecordedSlotNotForgotten run on targets with a Clock (memstore, sqlitestore, pgstore)")
	}
	for _, tc := range tests {
		if tc.fake && !movable {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Store == nil || tg.Complete == nil || tg.Count == nil {
				t.Fatal("scheduletest: Target needs Store, Complete and Count")
			}
			if tc.fake && tg.Clock == nil {
				t.Fatal("scheduletest: the Target's Clock is set for some cases and not others")
			}
			if tg.Unit <= 0 {
				tg.Unit = 25 * time.Millisecond
			}
			tc.fn(&env{Target: tg, t: t})
		})
	}
}

// RunClocks runs the suite twice: as "FakeClock", with newTarget given a
// fresh Clock (set to 2029-01-01 UTC) that the target's store must follow,
// and as "RealClock", with newTarget given nil (the store's own clock).
func RunClocks(t *testing.T, newTarget func(t *testing.T, clock *Clock) Target) {
	t.Run("FakeClock", func(t *testing.T) {
		Run(t, func(t *testing.T) Target {
			return newTarget(t, NewClock(time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)))
		})
	})
	t.Run("RealClock", func(t *testing.T) {
		Run(t, func(t *testing.T) Target { return newTarget(t, nil) })
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// jobName returns a job name unique to the running test.
func jobName(t *testing.T, suffix string) string {
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("t%08x-%d-%s", h.Sum32(), time.Now().UnixNano()%1_000_000_000, suffix)
}

func (e *env) node() schedule.Store {
	if e.Node != nil {
		return e.Node(e.t)
	}
	return e.Store
}

func (e *env) fake() bool { return e.Clock != nil }

// claimTTL is the claim lease time: short on real clocks, so a dead
// node's claim expires soon; on a fake clock it expires only when the test
// moves the clock, and the real-time validity must not run out first.
func (e *env) claimTTL() time.Duration {
	if e.fake() {
		return 6 * time.Hour
	}
	return 2 * time.Second
}

func (e *env) opts(node string) *schedule.Options {
	o := &schedule.Options{Node: node, PollInterval: 2 * time.Millisecond, ClaimTTL: e.claimTTL(), StopTimeout: 5 * time.Second}
	if os.Getenv("SCHEDULETEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
	}
	if e.fake() {
		o.Clock = e.Clock.Now
	} else {
		o.PollInterval = max(e.Unit/5, time.Millisecond)
	}
	return o
}

func (e *env) now() time.Time {
	e.t.Helper()
	n, err := e.Store.Now(ctxT(e.t))
	if err != nil {
		e.t.Fatalf("Now: %v", err)
	}
	return n
}

// expire waits until the claim on key has expired on the store's clock
// (moving a fake clock past it).
func (e *env) expire(s schedule.Store, key string) {
	e.t.Helper()
	if e.fake() {
		e.Clock.Advance(e.claimTTL() + time.Millisecond)
	}
	e.waitFor("claim "+key+" to expire", func() bool {
		info, err := s.Claims().Inspect(ctxT(e.t), key)
		return err == nil && !info.Held
	})
}

// waitFor polls cond until it holds (at most a minute).
func (e *env) waitFor(what string, cond func() bool, detail ...func() string) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			var more []string
			for _, d := range detail {
				more = append(more, d())
			}
			e.t.Fatalf("timed out waiting for %s %s", what, strings.Join(more, "; "))
		}
		time.Sleep(time.Millisecond)
	}
}

// newScheduler returns a scheduler on store (the test fails if New
// refuses the options).
func (e *env) newScheduler(store schedule.Store, o *schedule.Options) *schedule.Scheduler {
	e.t.Helper()
	s, err := schedule.New(store, o)
	if err != nil {
		e.t.Fatalf("schedule.New: %v", err)
	}
	return s
}

// started is a scheduler running in the background.
type started struct {
	*schedule.Scheduler
	cancel context.CancelFunc
	done   chan error
}

// stop stops the scheduler gracefully and waits for Run to return.
func (s *started) stop() {
	s.cancel()
	<-s.done
}

// start runs a scheduler with jobs until the test ends (or stop).
func (e *env) start(store schedule.Store, o *schedule.Options, jobs ...schedule.Job) *started {
	e.t.Helper()
	f, ok := store.(*Faulty)
	if !ok {
		f = NewFaulty(store)
	}
	s := e.newScheduler(f, o)
	for _, j := range jobs {
		if err := s.Add(j); err != nil {
			e.t.Fatalf("Add(%s): %v", j.Name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &started{Scheduler: s, cancel: cancel, done: make(chan error)}
	go func() {
		if err := s.Run(ctx); err != nil {
			e.t.Errorf("Run: %v", err)
		}
		close(st.done)
	}()
	// Wait until the first poll is over, so the node has taken its cursor
	// from the store's clock before the test moves it.
	polls := f.Polls()
	e.waitFor("the first poll", func() bool { return f.Polls() >= polls+2 || f.IsCut() })
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-st.done:
		case <-time.After(time.Minute):
			e.t.Errorf("scheduler %s did not stop", o.Node)
		}
	})
	return st
}

func (e *env) count(job string) int64 {
	e.t.Helper()
	n, err := e.Count(ctxT(e.t), job)
	if err != nil {
		e.t.Fatalf("Count(%s): %v", job, err)
	}
	return n
}

func (e *env) record(job, id string) (schedule.Record, bool) {
	e.t.Helper()
	r, err := e.Store.Slot(ctxT(e.t), job, id)
	if errors.Is(err, schedule.ErrNotFound) {
		return schedule.Record{}, false
	}
	if err != nil {
		e.t.Fatalf("Slot(%s, %s): %v", job, id, err)
	}
	return r, true
}

func (e *env) records(job string) []schedule.Record {
	e.t.Helper()
	rs, err := e.Store.Slots(ctxT(e.t), job, time.Unix(0, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	if err != nil {
		e.t.Fatalf("Slots(%s): %v", job, err)
	}
	return rs
}

func (e *env) waitState(job, id string, want schedule.State, detail ...func() string) schedule.Record {
	e.t.Helper()
	var (
		r  schedule.Record
		ok bool
	)
	last := func() string {
		if !ok {
			return "(no record)"
		}
		return fmt.Sprintf("(last record %+v)", r)
	}
	e.waitFor(fmt.Sprintf("slot %s to be %s", id, want), func() bool {
		r, ok = e.record(job, id)
		return ok && r.State == want
	}, append([]func() string{last}, detail...)...)
	return r
}

// pastSlot returns a slot of sched due on the store's clock.
func (e *env) pastSlot(sched schedule.Schedule) time.Time {
	return sched.Next(e.now().Add(-time.Hour))
}

// counter counts handler calls per slot ID.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *counter) total() (calls, slots int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.n {
		calls += n
	}
	return calls, len(c.n)
}

// completing is a handler that counts its calls and completes the slot
// with the business effect.
func (e *env) completing(c *counter) func(ctx context.Context, s *schedule.Slot) error {
	return func(ctx context.Context, s *schedule.Slot) error {
		c.add(s.ID)
		return e.Complete(ctx, s)
	}
}

func testInvalid(e *env) {
	t, ctx, s := e.t, ctxT(e.t), e.Store
	job := jobName(t, "x")
	at := e.now().Truncate(time.Second)
	cases := []struct {
		name string
		call func() error
	}{
		{"begin bad job", func() error {
			_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: "a/b", SlotID: "1", SlotTime: at, Node: "n", Fence: 1})
			return err
		}},
		{"begin empty id", func() error {
			_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "", SlotTime: at, Node: "n", Fence: 1})
			return err
		}},
		{"begin zero fence", func() error {
			_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "1", SlotTime: at, Node: "n", Fence: 0})
			return err
		}},
		{"begin zero time", func() error {
			_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "1", Node: "n", Fence: 1})
			return err
		}},
		{"begin empty node", func() error {
			_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "1", SlotTime: at, Fence: 1})
			return err
		}},
		{"finish bad state", func() error {
			_, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "1", Fence: 1, State: schedule.Missed})
			return err
		}},
		{"mark bad state", func() error {
			_, _, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "1", SlotTime: at, Node: "n", State: schedule.Done})
			return err
		}},
		{"mark id with space", func() error {
			_, _, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "a b", SlotTime: at, Node: "n", State: schedule.Missed})
			return err
		}},
		{"slots bad job", func() error { _, err := s.Slots(ctx, "", at, at, 0); return err }},
		{"add bad job", func() error {
			return e.newScheduler(s, nil).Add(schedule.Job{Name: "no/slash", Schedule: schedule.Every(time.Second), Run: func(context.Context, *schedule.Slot) error { return nil }})
		}},
		{"add bad interval", func() error {
			return e.newScheduler(s, nil).Add(schedule.Job{Name: job, Schedule: schedule.Every(time.Microsecond), Run: func(context.Context, *schedule.Slot) error { return nil }})
		}},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
		}
	}
	if _, ok := e.record(job, "1"); ok {
		t.Fatal("an invalid call wrote a record")
	}
	if _, ok, err := s.Last(ctx, job); err != nil || ok {
		t.Fatalf("Last after invalid calls = %v, %v", ok, err)
	}
}

func testRecordContract(e *env) {
	t, ctx, s := e.t, ctxT(e.t), e.Store
	job := jobName(t, "c")
	now := e.now()
	at := now.Add(-10 * time.Second).Truncate(time.Millisecond)

	// Not due on the store's clock.
	_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "future", SlotTime: now.Add(time.Hour), Node: "n1", Fence: 10})
	var nd *schedule.NotDueError
	if !errors.As(err, &nd) || !errors.Is(err, schedule.ErrNotDue) || nd.Wait < 50*time.Minute || nd.Wait > time.Hour {
		t.Fatalf("Begin of a future slot: %v, want NotDueError of about 1h", err)
	}
	if _, ok := e.record(job, "future"); ok {
		t.Fatal("a refused Begin wrote a record")
	}

	// Begin, repeat, stale.
	r, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "a", SlotTime: at, Node: "n1", Fence: 10})
	if err != nil || r.State != schedule.Running || r.Attempts != 1 || r.Node != "n1" || r.Fence != 10 || r.Started.IsZero() {
		t.Fatalf("Begin = %+v, %v", r, err)
	}
	if !r.SlotTime.Equal(at) {
		t.Fatalf("SlotTime = %v, want %v", r.SlotTime, at)
	}
	if r2, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "a", SlotTime: at, Node: "n1", Fence: 10}); err != nil || r2.Attempts != 1 {
		t.Fatalf("repeated Begin = %+v, %v; want the same attempt", r2, err)
	}
	if _, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "a", SlotTime: at, Node: "n2", Fence: 9}); !errors.Is(err, schedule.ErrStale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Begin with an older fence: %v, want ErrStale", err)
	}
	if _, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "a", Fence: 11, State: schedule.Done}); !errors.Is(err, schedule.ErrStale) {
		t.Fatalf("Finish with another fence: %v, want ErrStale", err)
	}
	// A newer attempt takes over (the first one's node died).
	r, err = s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "a", SlotTime: at, Node: "n2", Fence: 20})
	if err != nil || r.Attempts != 2 || r.Node != "n2" || r.Fence != 20 {
		t.Fatalf("takeover Begin = %+v, %v", r, err)
	}
	if _, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "a", Fence: 10, State: schedule.Done}); !errors.Is(err, schedule.ErrStale) {
		t.Fatalf("the superseded attempt's Finish: %v, want ErrStale", err)
	}
	// Failure with a retry: not final, not due before RetryAt.
	r, err = s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "a", Fence: 20, State: schedule.Failed, Error: "boom", RetryAfter: time.Hour})
	if err != nil || r.State != schedule.Failed || r.Error != "boom" || r.RetryAt.Before(now.Add(50*time.Minute)) || r.Final() || r.Finished.IsZero() {
		t.Fatalf("Finish failed with retry = %+v, %v", r, err)
	}
	un, err := s.Unfinished(ctx, job, 10)
	if err != nil || len(un) != 1 || un[0].SlotID != "a" {
		t.Fatalf("Unfinished = %+v, %v", un, err)
	}
	if _, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "a", SlotTime: at, Node: "n1", Fence: 30}); !errors.Is(err, schedule.ErrNotDue) {
		t.Fatalf("Begin before RetryAt: %v, want ErrNotDue", err)
	}

	// Done is final; a later Begin gets the record.
	b := at.Add(time.Second)
	if _, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "b", SlotTime: b, Node: "n1", Fence: 40}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "b", Fence: 40, State: schedule.Done})
	if err != nil || r.State != schedule.Done || !r.Final() {
		t.Fatalf("Finish done = %+v, %v", r, err)
	}
	if r, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "b", Fence: 40, State: schedule.Failed, Error: "late"}); err != nil || r.State != schedule.Done {
		t.Fatalf("Finish failed after done = %+v, %v; want done kept", r, err)
	}
	_, err = s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "b", SlotTime: b, Node: "n2", Fence: 50})
	var fe *schedule.FinalError
	if !errors.As(err, &fe) || fe.Record.State != schedule.Done || !errors.Is(err, schedule.ErrFinal) {
		t.Fatalf("Begin of a done slot: %v, want FinalError(done)", err)
	}
	if r, wrote, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "b", SlotTime: b, Node: "n3", State: schedule.Missed}); err != nil || wrote || r.State != schedule.Done {
		t.Fatalf("Mark of a done slot = %+v, %v, %v", r, wrote, err)
	}

	// Mark, skip.
	c := at.Add(2 * time.Second)
	r, wrote, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "c", SlotTime: c, Node: "n3", State: schedule.Missed, Reason: "late"})
	if err != nil || !wrote || r.State != schedule.Missed || r.Error != "late" || r.Attempts != 0 {
		t.Fatalf("Mark = %+v, %v, %v", r, wrote, err)
	}
	if _, wrote, _ := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "c", SlotTime: c, Node: "n1", State: schedule.Skipped}); wrote {
		t.Fatal("a second Mark wrote")
	}
	if _, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "c", SlotTime: c, Node: "n1", Fence: 60}); !errors.Is(err, schedule.ErrFinal) {
		t.Fatalf("Begin of a missed slot: %v", err)
	}
	d := at.Add(3 * time.Second)
	r, err = s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "d", SlotTime: d, Node: "n1", Fence: 70, Skip: true, Reason: "overlap"})
	if err != nil || r.State != schedule.Skipped || r.Attempts != 0 || !r.Final() {
		t.Fatalf("Begin skip = %+v, %v", r, err)
	}

	// Queries.
	all := e.records(job)
	ids := make([]string, len(all))
	for i, r := range all {
		ids[i] = r.SlotID
	}
	if !slices.Equal(ids, []string{"a", "b", "c", "d"}) {
		t.Fatalf("Slots = %v, want a b c d in slot order", ids)
	}
	if rs, err := s.Slots(ctx, job, b, d, 1); err != nil || len(rs) != 1 || rs[0].SlotID != "b" {
		t.Fatalf("Slots(b, d, 1) = %+v, %v", rs, err)
	}
	if last, ok, err := s.Last(ctx, job); err != nil || !ok || !last.Equal(d) {
		t.Fatalf("Last = %v, %v, %v; want %v", last, ok, err, d)
	}
	if _, err := s.Slot(ctx, job, "zz"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Slot of an unknown slot: %v", err)
	}
}

// claimOne adds job to a fresh scheduler on store and claims slot at.
func (e *env) claimOne(store schedule.Store, job string, sched schedule.Schedule, at time.Time, node string) (*schedule.Scheduler, *schedule.Slot) {
	e.t.Helper()
	s := e.newScheduler(store, e.opts(node))
	if err := s.Add(schedule.Job{Name: job, Schedule: sched, Run: func(context.Context, *schedule.Slot) error { return nil }}); err != nil {
		e.t.Fatal(err)
	}
	slot, err := s.Claim(ctxT(e.t), job, at)
	if err != nil {
		e.t.Fatalf("Claim(%s) on %s: %v", at, node, err)
	}
	return s, slot
}

// slot-once: two workers complete the same claim at once; one applies.
func testCompleteOnce(e *env) {
	t := e.t
	job := jobName(t, "once")
	sched := schedule.Every(time.Second)
	at := e.pastSlot(sched)
	s, slot := e.claimOne(e.Store, job, sched, at, "n1")
	if slot.Attempt != 1 || slot.ID != sched.ID(at) || slot.Fence == 0 {
		t.Fatalf("claimed %v", slot)
	}
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		applied  atomic.Int32
		refusals []error
		mu       sync.Mutex
	)
	for range 2 {
		wg.Go(func() {
			<-start
			err := e.Complete(ctxT(t), slot)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				applied.Add(1)
			} else {
				refusals = append(refusals, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if applied.Load() != 1 || len(refusals) != 1 || !errors.Is(refusals[0], schedule.ErrCompleted) {
		t.Fatalf("applied %d, refusals %v; want 1 and one ErrCompleted", applied.Load(), refusals)
	}
	if n := e.count(job); n != 1 {
		t.Fatalf("business counter = %d, want 1", n)
	}
	r := e.waitState(job, slot.ID, schedule.Done)
	if r.Fence != slot.Fence || r.Attempts != 1 {
		t.Fatalf("record %+v", r)
	}
	if r, err := s.Finish(ctxT(t), slot, nil); err != nil || r.State != schedule.Done {
		t.Fatalf("Finish after completion = %+v, %v", r, err)
	}
	if err := e.Complete(ctxT(t), slot); !errors.Is(err, schedule.ErrCompleted) {
		t.Fatalf("a third completion: %v, want ErrCompleted", err)
	}
	if n := e.count(job); n != 1 {
		t.Fatalf("business counter = %d, want 1", n)
	}
}

// A node paused past its claim commits late: refused whether or not the
// next node has written yet.
func testPausedPastClaim(e *env) {
	t := e.t
	job := jobName(t, "paused")
	sched := schedule.Every(time.Second)
	at := e.pastSlot(sched)
	_, a := e.claimOne(e.Store, job, sched, at, "a")
	e.expire(e.Store, scheddriver.ClaimKey(job, a.ID))
	// The claim has expired, nobody else has claimed: still refused (the
	// window a max-fence guard leaves open).
	if err := e.Complete(ctxT(t), a); !errors.Is(err, schedule.ErrStale) || !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("late completion before the next claim: %v, want ErrStale and lease.ErrNotHeld", err)
	}
	nodeB := e.node()
	_, b := e.claimOne(nodeB, job, sched, at, "b")
	if b.Fence <= a.Fence || b.Attempt != 2 || b.ID != a.ID {
		t.Fatalf("takeover %v after %v: want the same ID, a greater fence and attempt 2", b, a)
	}
	if err := e.Complete(ctxT(t), a); !errors.Is(err, schedule.ErrStale) {
		t.Fatalf("late completion while b holds the claim: %v, want ErrStale", err)
	}
	if err := e.Complete(ctxT(t), b); err != nil {
		t.Fatalf("b's completion: %v", err)
	}
	if err := e.Complete(ctxT(t), a); err == nil {
		t.Fatal("late completion after b's was accepted")
	}
	if n := e.count(job); n != 1 {
		t.Fatalf("business counter = %d, want 1", n)
	}
	r := e.waitState(job, a.ID, schedule.Done)
	if r.Fence != b.Fence || r.Node != "b" || r.Attempts != 2 {
		t.Fatalf("record %+v, want b's attempt", r)
	}
}

// A node commits the business change with the completion, then dies
// before its own bookkeeping (Finish, release): recovery on another node
// does not apply the slot again.
func testKilledBetween(e *env) {
	t := e.t
	job := jobName(t, "killed")
	sched := schedule.Every(e.Unit)
	if e.fake() {
		sched = schedule.Every(time.Minute)
	}
	at := sched.Next(e.now().Add(-5 * e.Unit))
	_, a := e.claimOne(e.Store, job, sched, at, "a")
	if err := e.Complete(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	// a is killed here: no Finish, no release, no renewal.
	e.expire(e.Store, scheddriver.ClaimKey(job, a.ID))
	var calls counter
	b := e.start(e.node(), e.opts("b"), schedule.Job{Name: job, Schedule: sched, Run: e.completing(&calls), Overlap: schedule.OverlapAllow})
	if _, err := b.Claim(ctxT(t), job, at); !errors.Is(err, schedule.ErrFinal) {
		t.Fatalf("recovery's claim of the completed slot: %v, want ErrFinal", err)
	}
	// Let b run a later slot, so it has certainly looked at the job.
	if e.fake() {
		e.Clock.Advance(time.Minute)
	}
	e.waitFor("a later slot done", func() bool {
		for _, r := range e.records(job) {
			if r.SlotTime.After(at) && r.State == schedule.Done {
				return true
			}
		}
		return false
	})
	b.stop()
	if n := calls.get(a.ID); n != 0 {
		t.Fatalf("recovery ran the completed slot's handler %d times", n)
	}
	r, _ := e.record(job, a.ID)
	if r.State != schedule.Done || r.Attempts != 1 || r.Node != "a" {
		t.Fatalf("record %+v, want done by a's single attempt", r)
	}
	_, slots := calls.total()
	for _, r := range e.records(job) {
		if r.State == schedule.Failed || r.State == schedule.Running {
			t.Errorf("slot %s: %+v", r.SlotID, r)
		}
	}
	if n := e.count(job); n != int64(1+slots) {
		t.Fatalf("business counter = %d, want %d (a's slot once, and b's)", n, 1+slots)
	}
}

// A node dies while its handler runs: another node re-runs the same slot
// under the same ID once the claim expires.
func testDeadNode(e *env) {
	t := e.t
	job := jobName(t, "dead")
	var sched schedule.Schedule = schedule.Every(time.Hour)
	var win bounded // on the real clock: closed once the dead slot is done
	if !e.fake() {
		win = window(schedule.Every(e.Unit), e.now(), e.now().Add(24*time.Hour))
		sched = win
	}
	faulty := NewFaulty(e.Store)
	var first atomic.Pointer[schedule.Slot]
	aRan := make(chan struct{})
	var aCalls counter
	oa := e.opts("a")
	oa.StopTimeout = 10 * time.Millisecond
	e.start(faulty, oa, schedule.Job{Name: job, Schedule: sched, Overlap: schedule.OverlapAllow,
		Run: func(ctx context.Context, s *schedule.Slot) error {
			aCalls.add(s.ID)
			if first.CompareAndSwap(nil, s) {
				faulty.Cut() // the node dies mid-run
				close(aRan)
			}
			<-ctx.Done()
			return ctx.Err()
		}})
	if e.fake() {
		e.Clock.Advance(time.Hour)
	}
	<-aRan
	t.Cleanup(faulty.Heal) // before a stops: let it wind down quickly
	dead := first.Load()
	var bCalls counter
	b := e.start(e.node(), e.opts("b"), schedule.Job{Name: job, Schedule: sched, Overlap: schedule.OverlapAllow, Run: e.completing(&bCalls)})
	if e.fake() {
		e.expire(e.Store, scheddriver.ClaimKey(job, dead.ID))
	}
	r := e.waitState(job, dead.ID, schedule.Done)
	// On the real clock a may have begun a later slot too before it was
	// cut off: b takes that one over once its claim runs out. No slot
	// comes due after this point, so b settles every slot there is before
	// it stops, however far behind a loaded machine leaves it.
	if !e.fake() {
		win.w.Store(&[2]time.Time{win.w.Load()[0], e.now()})
	}
	e.waitFor("every slot a began settled by b", func() bool {
		for _, r := range e.records(job) {
			if r.State == schedule.Failed || r.State == schedule.Running {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("(records %+v)", e.records(job)) })
	b.stop()
	if r.Node != "b" || r.Attempts != 2 || r.Fence <= dead.Fence {
		t.Fatalf("record %+v, want b's second attempt with a fence above %d", r, dead.Fence)
	}
	if aCalls.get(dead.ID) != 1 || bCalls.get(dead.ID) != 1 {
		t.Fatalf("handler calls: a %d, b %d; want 1 each", aCalls.get(dead.ID), bCalls.get(dead.ID))
	}
	// b's counter covers the dead slot once, plus any later slot it ran.
	_, slots := bCalls.total()
	for _, r := range e.records(job) {
		if r.State == schedule.Failed || r.State == schedule.Running {
			t.Errorf("slot %s: %+v", r.SlotID, r)
		}
	}
	if n := e.count(job); n != int64(slots) {
		t.Fatalf("business counter = %d, want %d", n, slots)
	}
}

// runNodes runs one job with Overlap allow on several nodes until n slots
// are done, stops them, and checks that the effect of every slot between
// the first and the last done one happened once: none twice, none lost.
func (e *env) runNodes(n int, skews []time.Duration) {
	t := e.t
	job := jobName(t, "many")
	period := e.Unit
	if e.fake() {
		period = time.Minute
	}
	// n slots, then none: every node sees the same finite set, and the
	// test waits until each is final. The slots are chosen once every
	// node has polled (its cursor taken from the store's clock), so that
	// no node can start after the first slot, however slow the machine.
	every := schedule.Every(period)
	sched := bounded{Schedule: every, w: new(atomic.Pointer[[2]time.Time])}
	var calls counter
	var nodes []*started
	for i, skew := range skews {
		o := e.opts(fmt.Sprintf("n%d", i))
		if e.fake() {
			o.Clock = func() time.Time { return e.Clock.Now().Add(skew) }
		} else {
			o.Clock = func() time.Time { return time.Now().Add(skew) }
		}
		j := schedule.Job{Name: job, Schedule: sched, Overlap: schedule.OverlapAllow, Run: e.completing(&calls)}
		if !e.fake() {
			// A store call that times out on a loaded machine fails the
			// attempt; a retry keeps such a slot from ending failed.
			j.Retry = schedule.Retry{Attempts: 3, Backoff: e.Unit}
		}
		nodes = append(nodes, e.start(e.node(), o, j))
	}
	var want []time.Time
	for at := every.Next(e.now()); len(want) < n; at = every.Next(at) {
		want = append(want, at)
	}
	sched.w.Store(&[2]time.Time{want[0], want[len(want)-1]})
	final := func(at time.Time) bool {
		r, ok := e.record(job, sched.ID(at))
		return ok && r.Final()
	}
	for i, at := range want {
		if e.fake() {
			e.Clock.Set(at)
		}
		e.waitFor(fmt.Sprintf("slot %d final", i), func() bool { return final(at) }, func() string {
			r, ok := e.record(job, sched.ID(at))
			return fmt.Sprintf("(slot %s: recorded %v, %+v)", sched.ID(at), ok, r)
		})
	}
	for _, nd := range nodes {
		nd.stop()
	}
	rs := e.records(job)
	if len(rs) != n {
		t.Fatalf("%d records, want %d", len(rs), n)
	}
	for i, r := range rs {
		if r.State != schedule.Done || r.SlotID != sched.ID(want[i]) {
			t.Errorf("slot %d: %+v, want done %s", i, r, sched.ID(want[i]))
		}
		if r.Started.Before(r.SlotTime) {
			t.Errorf("slot %s started at %v, before its time on the store's clock", r.SlotID, r.Started)
		}
	}
	if cnt := e.count(job); cnt != int64(n) {
		t.Fatalf("business counter = %d, want %d (one per distinct slot)", cnt, n)
	}
	callsN, slots := calls.total()
	if slots != n {
		t.Fatalf("handlers ran %d distinct slots, want %d", slots, n)
	}
	t.Logf("%d slots done on %d nodes, %d handler calls (more than the slots only where a claim was lost under load and the slot ran again)", n, len(nodes), callsN)
}

// bounded is a schedule of the slots of Schedule in a window (first and
// last slot), set once: before that it has none.
type bounded struct {
	schedule.Schedule
	w *atomic.Pointer[[2]time.Time]
}

// window returns a bounded schedule of every's slots from first to last.
func window(every schedule.Schedule, first, last time.Time) bounded {
	b := bounded{Schedule: every, w: new(atomic.Pointer[[2]time.Time])}
	b.w.Store(&[2]time.Time{first, last})
	return b
}

func (b bounded) Next(t time.Time) time.Time {
	w := b.w.Load()
	if w == nil {
		return time.Time{}
	}
	if t.Before(w[0]) {
		t = w[0].Add(-time.Nanosecond)
	}
	at := b.Schedule.Next(t)
	if at.After(w[1]) {
		return time.Time{}
	}
	return at
}

func testThreeSchedulers(e *env) { e.runNodes(200, []time.Duration{0, 0, 0}) }

func testSkewedClocks(e *env) {
	e.runNodes(40, []time.Duration{-5 * time.Second, 0, 7 * time.Second})
}

func testRetry(e *env) {
	t := e.t
	job := jobName(t, "retry")
	sched := schedule.Every(e.Unit)
	backoff := e.Unit
	if e.fake() {
		sched = schedule.Every(time.Hour)
		backoff = time.Minute
	}
	var calls counter
	var first atomic.Pointer[schedule.Slot]
	e.start(e.node(), e.opts("n"), schedule.Job{Name: job, Schedule: sched, Overlap: schedule.OverlapAllow,
		Retry: schedule.Retry{Attempts: 3, Backoff: backoff},
		Run: func(ctx context.Context, s *schedule.Slot) error {
			calls.add(s.ID)
			first.CompareAndSwap(nil, s)
			if s.ID != first.Load().ID {
				return nil
			}
			if s.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			return e.Complete(ctx, s)
		}})
	if e.fake() {
		e.Clock.Advance(time.Hour)
	}
	e.waitFor("first attempt", func() bool { return first.Load() != nil })
	id := first.Load().ID
	if e.fake() {
		r := e.waitState(job, id, schedule.Failed)
		if r.Attempts != 1 || r.RetryAt.IsZero() || r.Error != "first attempt fails" || r.Final() {
			t.Fatalf("after the first attempt: %+v", r)
		}
		e.Clock.Advance(backoff)
	}
	r := e.waitState(job, id, schedule.Done)
	if r.Attempts != 2 || calls.get(id) != 2 || e.count(job) != 1 {
		t.Fatalf("record %+v, calls %d, counter %d; want done at attempt 2, counter 1", r, calls.get(id), e.count(job))
	}
}

func testGracefulStop(e *env) {
	t := e.t
	job := jobName(t, "stop")
	sched := schedule.Every(e.Unit)
	if e.fake() {
		sched = schedule.Every(time.Minute)
	}
	running := make(chan *schedule.Slot, 1)
	var sawCancel atomic.Bool
	o := e.opts("n")
	o.StopTimeout = 50 * time.Millisecond
	st := e.start(e.node(), o, schedule.Job{Name: job, Schedule: sched, Run: func(ctx context.Context, s *schedule.Slot) error {
		select {
		case running <- s:
		default:
		}
		<-ctx.Done()
		sawCancel.Store(true)
		return ctx.Err()
	}})
	if e.fake() {
		e.Clock.Advance(time.Minute)
	}
	s := <-running
	st.stop() // returns only after the handler returned
	if !sawCancel.Load() {
		t.Fatal("Run returned before the handler's context was cancelled")
	}
	r := e.waitState(job, s.ID, schedule.Failed)
	// Cut short by the node's own stop, not by the handler: due again at
	// once, whatever Retry says, as a dead node's slot would be.
	if r.Attempts != 1 || r.RetryAt.IsZero() || !strings.Contains(r.Error, "stopped") {
		t.Fatalf("record %+v, want failed once with a retry due", r)
	}
	info, err := e.Store.Claims().Inspect(ctxT(t), scheddriver.ClaimKey(job, s.ID))
	if err != nil || info.Held {
		t.Fatalf("claim after stop: %+v, %v; want released", info, err)
	}
	// Another node runs it.
	var calls counter
	e.start(e.node(), e.opts("m"), schedule.Job{Name: job, Schedule: sched, Run: e.completing(&calls)})
	if e.fake() {
		e.Clock.Advance(time.Second)
	}
	r = e.waitState(job, s.ID, schedule.Done)
	if r.Attempts != 2 || r.Node != "m" || calls.get(s.ID) != 1 {
		t.Fatalf("record %+v after another node took the slot over, %d calls", r, calls.get(s.ID))
	}
}
