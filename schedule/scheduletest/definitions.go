package scheduletest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// logs keeps the messages of the records a scheduler logs at Warn and
// above.
type logs struct {
	mu   sync.Mutex
	msgs []string
	full []string // each record's time, message and attributes
}

// all returns the records logged so far, each with its time and
// attributes.
func (l *logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.full)
}

func (l *logs) Enabled(_ context.Context, lv slog.Level) bool {
	return lv >= slog.LevelInfo || os.Getenv("SCHEDULETEST_LOG") != ""
}
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.full = append(l.full, r.Time.Format("15:04:05.000")+" "+r.Message+b.String())
	if os.Getenv("SCHEDULETEST_LOG") != "" {
		fmt.Fprintf(os.Stderr, "%s %p %s%s\n", r.Time.Format("15:04:05.000"), l, r.Message, b.String())
	}
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// has reports whether a message containing s was logged.
func (l *logs) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// prefixed is a schedule whose slot IDs carry a prefix: the same instants
// as its inner schedule under other IDs, as a changed cron expression or
// zone gives.
type prefixed struct {
	schedule.Schedule
	prefix string
}

func (p prefixed) ID(t time.Time) string { return p.prefix + p.Schedule.ID(t) }
func (p prefixed) String() string        { return p.prefix + p.Schedule.String() }

// The store's side of definitions: Register returns the one it replaced,
// Begin and Mark under a replaced fingerprint are refused and write
// nothing, an empty fingerprint skips the check.
func testDefinitionContract(e *env) {
	t, ctx, s := e.t, ctxT(e.t), e.Store
	job := jobName(t, "def")
	if _, err := s.Definition(ctx, job); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Definition before any Register: %v, want ErrNotFound", err)
	}
	for _, bad := range []scheddriver.RegisterRequest{
		{Job: job, Fingerprint: "", Node: "a"},
		{Job: job, Fingerprint: "has space", Node: "a"},
		{Job: job, Fingerprint: strings.Repeat("f", schedule.MaxFingerprintLen+1), Node: "a"},
		{Job: "bad job", Fingerprint: "v1", Node: "a"},
		{Job: job, Fingerprint: "v1", Node: ""},
	} {
		if _, err := s.Register(ctx, bad); !errors.Is(err, schedule.ErrInvalid) {
			t.Fatalf("Register(%+v): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.Definition(ctx, job); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Definition after refused Registers: %v, want ErrNotFound", err)
	}
	prev, err := s.Register(ctx, scheddriver.RegisterRequest{Job: job, Fingerprint: "v1", Spec: "every 1m", Node: "a"})
	if err != nil || prev.Fingerprint != "" {
		t.Fatalf("first Register: %+v, %v", prev, err)
	}
	d1, err := s.Definition(ctx, job)
	if err != nil || d1.Fingerprint != "v1" || d1.Spec != "every 1m" || d1.Node != "a" || d1.Registered.IsZero() || d1.Job != job {
		t.Fatalf("Definition: %+v, %v", d1, err)
	}
	// The same definition again changes nothing.
	prev, err = s.Register(ctx, scheddriver.RegisterRequest{Job: job, Fingerprint: "v1", Spec: "every 1m", Node: "b"})
	if err != nil || prev.Fingerprint != "v1" || prev.Node != "a" {
		t.Fatalf("Register of the current definition: %+v, %v", prev, err)
	}
	if d, _ := s.Definition(ctx, job); d.Node != "a" || !d.Registered.Equal(d1.Registered) {
		t.Fatalf("Definition after registering it again: %+v, want it unchanged (%+v)", d, d1)
	}
	at := e.now().Add(-time.Hour).Truncate(time.Second)
	begin := func(id, fp string, f uint64) error {
		_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: id, SlotTime: at, Node: "a", Fence: f, Definition: fp})
		return err
	}
	if err := begin("s1", "v1", 1); err != nil {
		t.Fatalf("Begin under the current definition: %v", err)
	}
	if e.fake() {
		e.Clock.Advance(time.Millisecond)
	}
	prev, err = s.Register(ctx, scheddriver.RegisterRequest{Job: job, Fingerprint: "v2", Spec: "every 2m", Node: "b"})
	if err != nil || prev.Fingerprint != "v1" || prev.Spec != "every 1m" || prev.Node != "a" {
		t.Fatalf("Register of a new definition: %+v, %v (want the replaced v1)", prev, err)
	}
	d2, err := s.Definition(ctx, job)
	if err != nil || d2.Fingerprint != "v2" || d2.Node != "b" || d2.Registered.Before(d1.Registered) {
		t.Fatalf("Definition after the switch: %+v, %v", d2, err)
	}
	if err := begin("s2", "v1", 1); !errors.Is(err, schedule.ErrSuperseded) {
		t.Fatalf("Begin under the replaced definition: %v, want ErrSuperseded", err)
	}
	_, wrote, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "s3", SlotTime: at, Node: "a", State: schedule.Missed, Reason: "late", Definition: "v1"})
	if !errors.Is(err, schedule.ErrSuperseded) || wrote {
		t.Fatalf("Mark under the replaced definition: %v (wrote %v), want ErrSuperseded", err, wrote)
	}
	for _, id := range []string{"s2", "s3"} {
		if _, ok := e.record(job, id); ok {
			t.Fatalf("slot %s has a record after a refused write", id)
		}
	}
	if err := begin("s2", "v2", 1); err != nil {
		t.Fatalf("Begin under the current definition: %v", err)
	}
	if err := begin("s4", "", 1); err != nil {
		t.Fatalf("Begin without a definition: %v", err)
	}
	if _, wrote, err := s.Mark(ctx, scheddriver.MarkRequest{Job: job, SlotID: "s3", SlotTime: at, Node: "b", State: schedule.Missed, Reason: "late", Definition: "v2"}); err != nil || !wrote {
		t.Fatalf("Mark under the current definition: %v (wrote %v)", err, wrote)
	}
	// A running attempt begun under v1 still ends.
	if _, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "s1", Fence: 1, State: schedule.Done}); err != nil {
		t.Fatalf("Finish of an attempt begun before the switch: %v", err)
	}
}

// Every attempt is kept in the slot's history (node, fence, start, end,
// outcome, error), the latest MaxHistory of them.
func testAttemptHistory(e *env) {
	t, ctx, s := e.t, ctxT(e.t), e.Store
	job := jobName(t, "hist")
	at := e.now().Add(-time.Hour).Truncate(time.Second)
	begin := func(id, node string, f uint64) schedule.Record {
		t.Helper()
		r, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: id, SlotTime: at, Node: node, Fence: f})
		if err != nil {
			t.Fatalf("Begin(%s, fence %d): %v", id, f, err)
		}
		return r
	}
	tick := func() {
		if e.fake() {
			e.Clock.Advance(time.Millisecond)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	begin("h", "a", 1) // a's node dies
	tick()
	begin("h", "b", 2)
	tick()
	if _, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "h", Fence: 2, State: schedule.Failed, Error: "boom", RetryAfter: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	tick()
	tick()
	e.waitFor("the retry to be due", func() bool {
		_, err := s.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: "h", SlotTime: at, Node: "c", Fence: 3})
		if errors.Is(err, schedule.ErrNotDue) {
			tick()
			return false
		}
		if err != nil {
			t.Fatalf("Begin of the retry: %v", err)
		}
		return true
	})
	tick()
	if _, err := s.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: "h", Fence: 3, State: schedule.Done}); err != nil {
		t.Fatal(err)
	}
	r, _ := e.record(job, "h")
	h := r.History
	if r.State != schedule.Done || r.Attempts != 3 || len(h) != 3 {
		t.Fatalf("record %+v, want done after 3 attempts, all in the history", r)
	}
	want := []struct {
		node    string
		fence   uint64
		outcome schedule.Outcome
		err     string
		ended   bool
	}{{"a", 1, schedule.AttemptSuperseded, "", false}, {"b", 2, schedule.AttemptFailed, "boom", true}, {"c", 3, schedule.AttemptDone, "", true}}
	for i, w := range want {
		a := h[i]
		if a.Node != w.node || a.Fence != w.fence || a.Outcome != w.outcome || a.Error != w.err || a.Started.IsZero() || a.Finished.IsZero() == w.ended {
			t.Fatalf("attempt %d = %+v, want node %s fence %d %s %q (ended %v)", i, a, w.node, w.fence, w.outcome, w.err, w.ended)
		}
		if w.ended && a.Finished.Before(a.Started) {
			t.Fatalf("attempt %d ends before it starts: %+v", i, a)
		}
		if i > 0 && a.Started.Before(h[i-1].Started) {
			t.Fatalf("attempt %d starts before attempt %d: %+v", i, i-1, h)
		}
	}
	if !h[2].Started.Equal(r.Started) || !h[2].Finished.Equal(r.Finished) {
		t.Fatalf("last attempt %+v and record %+v disagree on times", h[2], r)
	}
	rs := e.records(job)
	if len(rs) != 1 || len(rs[0].History) != 3 || rs[0].History[1].Error != "boom" {
		t.Fatalf("Slots: %+v, want the slot with its history", rs)
	}

	// The bound: takeovers without an end, beyond MaxHistory.
	n := schedule.MaxHistory + 4
	for f := 1; f <= n; f++ {
		begin("b", "n", uint64(f))
	}
	r, _ = e.record(job, "b")
	if r.Attempts != n || len(r.History) != schedule.MaxHistory {
		t.Fatalf("after %d attempts: Attempts %d, %d in the history; want %d, %d", n, r.Attempts, len(r.History), n, schedule.MaxHistory)
	}
	for i, a := range r.History {
		wantF := uint64(n - schedule.MaxHistory + 1 + i)
		wantO := schedule.AttemptSuperseded
		if i == len(r.History)-1 {
			wantO = schedule.AttemptRunning
		}
		if a.Fence != wantF || a.Outcome != wantO {
			t.Fatalf("history[%d] = %+v, want fence %d %s", i, a, wantF, wantO)
		}
	}

	// A slot completed with the business effect (CompleteSlot): its
	// attempt is done in the history before Finish, and stays so.
	sched := schedule.Every(time.Second)
	slotAt := sched.Next(e.now().Add(-5 * time.Second))
	sc, slot := e.claimOne(e.Store, job+"c", sched, slotAt, "a")
	if err := e.Complete(ctx, slot); err != nil {
		t.Fatal(err)
	}
	r, _ = e.record(job+"c", slot.ID)
	if r.State != schedule.Done || len(r.History) != 1 || r.History[0].Outcome != schedule.AttemptDone || r.History[0].Finished.IsZero() || r.History[0].Fence != slot.Fence {
		t.Fatalf("after CompleteSlot: %+v", r)
	}
	if _, err := sc.Finish(ctx, slot, nil); err != nil {
		t.Fatal(err)
	}
	r, _ = e.record(job+"c", slot.ID)
	if len(r.History) != 1 || r.History[0].Outcome != schedule.AttemptDone {
		t.Fatalf("after Finish: %+v", r)
	}
}

// Two nodes disagree about a job's definition, as in a rolling deploy
// that changes its schedule: the most recently registered one runs; the
// other node starts and records no slot from the switch on and warns; no
// slot runs twice.
func testDisagreeingNodes(e *env) {
	t, ctx := e.t, ctxT(e.t)
	job := jobName(t, "deploy")
	step := e.Unit
	if e.fake() {
		step = time.Minute
	}
	v1 := schedule.Every(step)
	v2 := prefixed{schedule.Every(2 * step), "v2-"}
	var callsA, callsB counter
	jobA := schedule.Job{Name: job, Schedule: v1, Run: e.completing(&callsA)}
	jobB := schedule.Job{Name: job, Schedule: v2, Run: e.completing(&callsB)}
	if jobA.Fingerprint() == jobB.Fingerprint() {
		t.Fatal("two definitions with the same fingerprint")
	}
	var logA, logB logs
	oa, ob := e.opts("a"), e.opts("b")
	oa.Logger, ob.Logger = slog.New(&logA), slog.New(&logB)

	// A runs v1 alone.
	a := e.start(e.Store, oa, jobA)
	doneBy := func(node, prefix string) int {
		n := 0
		for _, r := range e.records(job) {
			if r.State == schedule.Done && r.Node == node && strings.HasPrefix(r.SlotID, prefix) {
				n++
			}
		}
		return n
	}
	// state says, when a wait times out, what the job's slots and the
	// nodes' logs show.
	state := func() string {
		var rs []string
		for _, r := range e.records(job) {
			rs = append(rs, fmt.Sprintf("%s %v by %q after %d attempts %q", r.SlotID, r.State, r.Node, r.Attempts, r.Error))
		}
		return fmt.Sprintf("(slots: %s; a logged %q; b logged %q)", strings.Join(rs, ", "), logA.all(), logB.all())
	}
	if e.fake() {
		for range 2 {
			e.Clock.Advance(step)
			e.waitState(job, v1.ID(v1.Next(e.now().Add(-step))), schedule.Done)
		}
	} else {
		e.waitFor("two slots done by a", func() bool { return doneBy("a", "") >= 2 }, state)
	}
	if d, err := e.Store.Definition(ctx, job); err != nil || d.Fingerprint != jobA.Fingerprint() || d.Node != "a" {
		t.Fatalf("definition while a runs alone: %+v, %v", d, err)
	}

	// B starts with v2: it registers it, and from then on v2 runs.
	b := e.start(e.node(), ob, jobB)
	d, err := e.Store.Definition(ctx, job)
	if err != nil || d.Fingerprint != jobB.Fingerprint() || d.Node != "b" || d.Spec != jobB.Spec() {
		t.Fatalf("definition after b started: %+v, %v", d, err)
	}
	if !logB.has("replaces the registered one") {
		t.Fatalf("b did not warn that its definition replaced a's: %v", logB.msgs)
	}
	switched := d.Registered
	if e.fake() {
		for i := range 6 {
			e.Clock.Advance(step)
			now := e.now()
			if i == 0 {
				// An odd step: only a's schedule has a slot; a must have
				// tried it and stood down.
				e.waitFor("a to warn", func() bool { return logA.has("another definition of the job is the registered one") })
			}
			if v2.Next(now.Add(-step)).Equal(now) {
				e.waitState(job, v2.ID(now), schedule.Done)
			}
		}
	} else {
		e.waitFor("a to warn", func() bool { return logA.has("another definition of the job is the registered one") }, state)
		e.waitFor("three slots done by b", func() bool { return doneBy("b", "v2-") >= 3 }, state)
	}
	a.stop()
	b.stop()

	var done int64
	for _, r := range e.records(job) {
		// A slot whose time came while the run of the one before was still
		// running (a busy machine makes a run outlast the interval) is
		// skipped by the default overlap policy: it never ran, and its
		// record was written under its node's definition like a run's.
		at := r.Started
		if r.State == schedule.Skipped {
			if r.Attempts != 0 || len(r.History) != 0 || !strings.HasPrefix(r.Error, "overlap:") {
				t.Errorf("slot %s: %+v, want skipped for an overlap without an attempt", r.SlotID, r)
			}
			at = r.Finished
		} else {
			// Done at its last attempt, every attempt by its node: a
			// claim lost under load (the attempt outlasted it) is taken
			// again by the same node, never by the other definition's.
			last := len(r.History) - 1
			if r.State != schedule.Done || r.Attempts < 1 || len(r.History) != r.Attempts || r.History[last].Outcome != schedule.AttemptDone ||
				slices.ContainsFunc(r.History, func(a schedule.Attempt) bool { return a.Node != r.Node }) {
				t.Errorf("slot %s: %+v, want done at its last attempt, every attempt by its node", r.SlotID, r)
			}
			done++
		}
		if strings.HasPrefix(r.SlotID, "v2-") {
			if r.Node != "b" || at.Before(switched) {
				t.Errorf("v2 slot %s: %+v, want run by b after the switch at %v", r.SlotID, r, switched)
			}
			continue
		}
		if r.Node != "a" || r.SlotTime.After(switched) || at.After(switched) {
			t.Errorf("v1 slot %s: %+v, want run by a and begun before the switch at %v", r.SlotID, r, switched)
		}
	}
	if doneBy("b", "v2-") < 3 || doneBy("a", "") < 2 {
		t.Fatalf("done: %d by a, %d by b; want at least 2 and 3", doneBy("a", ""), doneBy("b", "v2-"))
	}
	if n := e.count(job); n != done {
		t.Fatalf("business counter %d, want %d (one per done slot)", n, done)
	}
	// Each node ran only its own definition's slots. (A slot's handler may
	// run again on its node where a claim was lost under load: the effect
	// counted above is what happens once.)
	callsA.mu.Lock()
	for id := range callsA.n {
		if strings.HasPrefix(id, "v2-") {
			t.Errorf("a ran v2 slot %s", id)
		}
	}
	callsA.mu.Unlock()
	callsB.mu.Lock()
	for id := range callsB.n {
		if !strings.HasPrefix(id, "v2-") {
			t.Errorf("b ran v1 slot %s", id)
		}
	}
	callsB.mu.Unlock()
	if c, slots := callsB.total(); c != slots {
		t.Logf("b: %d handler calls for %d slots (a claim lost under load)", c, slots)
	}
	// a keeps standing down; registering v1 again (a restarted with the
	// old definition) would make it the current one.
	if d, _ := e.Store.Definition(ctx, job); d.Fingerprint != jobB.Fingerprint() {
		t.Fatalf("definition at the end: %+v, want b's", d)
	}
}
