package scheduletest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/schedule"
)

// t0 is a whole minute in the far future of every real clock's slots.
var t0 = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// settle waits until job has no unfinished record and every slot in ids
// is final, then lets the nodes poll a few more times so that a slot the
// test did not expect would have been recorded.
func (e *env) settle(job string, sched schedule.Schedule, ats ...time.Time) {
	e.t.Helper()
	e.waitFor("slots to settle", func() bool {
		// Retries wait on the store's clock (a claim held elsewhere, no
		// catch-up permit free): let the fake one move, a millisecond at
		// a time, far below every threshold the cases use.
		e.Clock.Advance(time.Millisecond)
		for _, at := range ats {
			r, ok := e.record(job, sched.ID(at))
			if !ok || !r.Final() {
				return false
			}
		}
		un, err := e.Store.Unfinished(ctxT(e.t), job, 10)
		return err == nil && len(un) == 0
	})
	time.Sleep(20 * time.Millisecond)
}

// states returns "id=state" for every record of job.
func (e *env) states(job string) map[string]schedule.State {
	m := map[string]schedule.State{}
	for _, r := range e.records(job) {
		m[r.SlotID] = r.State
	}
	return m
}

func testMisfire(e *env) {
	sched := schedule.Every(time.Minute)
	slot := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	cases := []struct {
		name    string
		policy  schedule.Misfire
		window  time.Duration
		after   time.Duration // where the clock is after the downtime
		run     []int
		missed  []int
		ordered bool
	}{
		// Five slots (1..5) fall into the downtime; slot 5 is on time.
		{"skip/last-on-time", schedule.MisfireSkip, 0, 5 * time.Minute, []int{5}, []int{1, 2, 3, 4}, false},
		{"coalesce/last-on-time", schedule.MisfireCoalesce, 0, 5 * time.Minute, []int{5}, []int{1, 2, 3, 4}, false},
		{"catch-up/last-on-time", schedule.MisfireCatchUp, 150 * time.Second, 5 * time.Minute, []int{3, 4, 5}, []int{1, 2}, false},
		// All five are late (the clock is 45s past slot 5; threshold 30s).
		{"skip/all-late", schedule.MisfireSkip, 0, 5*time.Minute + 45*time.Second, nil, []int{1, 2, 3, 4, 5}, false},
		{"coalesce/all-late", schedule.MisfireCoalesce, 0, 5*time.Minute + 45*time.Second, []int{5}, []int{1, 2, 3, 4}, false},
		{"catch-up/all-late", schedule.MisfireCatchUp, 210 * time.Second, 5*time.Minute + 45*time.Second, []int{3, 4, 5}, []int{1, 2}, true},
		{"catch-up/whole-window", schedule.MisfireCatchUp, time.Hour, 5*time.Minute + 45*time.Second, []int{1, 2, 3, 4, 5}, nil, true},
	}
	for _, c := range cases {
		e.t.Run(c.name, func(t *testing.T) {
			e := &env{Target: e.Target, t: t}
			job := jobName(t, "misfire")
			var mu sync.Mutex
			var order []time.Time
			var calls counter
			j := schedule.Job{Name: job, Schedule: sched, Misfire: c.policy, MisfireThreshold: 30 * time.Second,
				CatchUpWindow: c.window, Overlap: schedule.OverlapAllow,
				Run: func(ctx context.Context, s *schedule.Slot) error {
					mu.Lock()
					order = append(order, s.Time)
					mu.Unlock()
					calls.add(s.ID)
					return e.Complete(ctx, s)
				}}
			e.Clock.Set(slot(0).Add(-time.Second))
			a := e.start(e.node(), e.opts("a"), j)
			e.Clock.Set(slot(0))
			e.settle(job, sched, slot(0))
			a.stop() // downtime
			e.Clock.Set(slot(0).Add(c.after))
			e.start(e.node(), e.opts("b"), j)
			all := []time.Time{slot(0)}
			for i := 1; i <= 5; i++ {
				all = append(all, slot(i))
			}
			e.settle(job, sched, all...)
			st := e.states(job)
			want := map[string]schedule.State{sched.ID(slot(0)): schedule.Done}
			for _, i := range c.run {
				want[sched.ID(slot(i))] = schedule.Done
			}
			for _, i := range c.missed {
				want[sched.ID(slot(i))] = schedule.Missed
			}
			if fmt.Sprint(st) != fmt.Sprint(want) {
				t.Fatalf("states %v\nwant   %v", st, want)
			}
			if n := e.count(job); n != int64(1+len(c.run)) {
				t.Fatalf("business counter = %d, want %d", n, 1+len(c.run))
			}
			if calls, _ := calls.total(); calls != 1+len(c.run) {
				t.Fatalf("%d handler calls, want %d", calls, 1+len(c.run))
			}
			if c.ordered && !slices.IsSortedFunc(order, func(a, b time.Time) int { return a.Compare(b) }) {
				t.Fatalf("catch-up ran out of order: %v", order)
			}
		})
	}
}

// Six late slots, a window that covers them all, concurrency 2, two
// nodes: never more than two run at once, the oldest start first.
func testCatchUpConcurrency(e *env) {
	t := e.t
	sched := schedule.Every(time.Minute)
	job := jobName(t, "catchup")
	var (
		mu       sync.Mutex
		running  int
		peak     int
		started  []time.Time
		release  = make(chan struct{})
		released atomic.Bool
	)
	j := schedule.Job{Name: job, Schedule: sched, Misfire: schedule.MisfireCatchUp, MisfireThreshold: 30 * time.Second,
		CatchUpWindow: time.Hour, CatchUpConcurrency: 2, Overlap: schedule.OverlapAllow,
		Run: func(ctx context.Context, s *schedule.Slot) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			started = append(started, s.Time)
			mu.Unlock()
			if !released.Load() {
				<-release
			}
			mu.Lock()
			running--
			mu.Unlock()
			return e.Complete(ctx, s)
		}}
	// One slot done, then a downtime of six.
	e.Clock.Set(t0.Add(-time.Second))
	a := e.start(e.node(), e.opts("a"), j)
	e.Clock.Set(t0)
	released.Store(true)
	e.settle(job, sched, t0)
	a.stop()
	released.Store(false)
	mu.Lock()
	started = nil
	mu.Unlock()
	e.Clock.Set(t0.Add(6*time.Minute + 45*time.Second))
	e.start(e.node(), e.opts("b1"), j)
	e.start(e.node(), e.opts("b2"), j)
	e.waitFor("two catch-up runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 2
	})
	time.Sleep(50 * time.Millisecond) // some 25 polls of each node
	mu.Lock()
	if running != 2 || peak != 2 {
		mu.Unlock()
		t.Fatalf("running %d, peak %d; want 2", running, peak)
	}
	mu.Unlock()
	released.Store(true)
	close(release)
	var all []time.Time
	for i := range 7 {
		all = append(all, t0.Add(time.Duration(i)*time.Minute))
	}
	e.settle(job, sched, all...)
	mu.Lock()
	defer mu.Unlock()
	if peak != 2 || len(started) != 6 {
		t.Fatalf("peak %d, %d started; want 2 and 6", peak, len(started))
	}
	if n := e.count(job); n != 7 {
		t.Fatalf("business counter = %d, want 7", n)
	}
}

func testOverlap(e *env) {
	sched := schedule.Every(time.Minute)
	for _, policy := range []schedule.Overlap{schedule.OverlapSkip, schedule.OverlapQueue, schedule.OverlapAllow} {
		e.t.Run(policy.String(), func(t *testing.T) {
			e := &env{Target: e.Target, t: t}
			job := jobName(t, "overlap")
			var (
				mu      sync.Mutex
				running int
				peak    int
				order   []string
				block   = make(chan struct{})
			)
			j := schedule.Job{Name: job, Schedule: sched, Overlap: policy, MisfireThreshold: time.Hour,
				Run: func(ctx context.Context, s *schedule.Slot) error {
					mu.Lock()
					running++
					peak = max(peak, running)
					order = append(order, s.ID)
					mu.Unlock()
					if s.Time.Equal(t0) {
						<-block
					}
					mu.Lock()
					running--
					mu.Unlock()
					return e.Complete(ctx, s)
				}}
			e.Clock.Set(t0.Add(-time.Second))
			e.start(e.node(), e.opts("a"), j)
			e.start(e.node(), e.opts("b"), j)
			e.Clock.Set(t0)
			e.waitFor("slot 0 running", func() bool { mu.Lock(); defer mu.Unlock(); return running == 1 })
			e.Clock.Set(t0.Add(time.Minute))
			s1 := sched.ID(t0.Add(time.Minute))
			switch policy {
			case schedule.OverlapSkip:
				r := e.waitState(job, s1, schedule.Skipped)
				if r.Attempts != 0 || !strings.Contains(r.Error, "overlap") {
					t.Fatalf("skipped record %+v", r)
				}
			case schedule.OverlapQueue:
				time.Sleep(50 * time.Millisecond)
				mu.Lock()
				n := len(order)
				mu.Unlock()
				if n != 1 {
					t.Fatalf("%d runs while slot 0 still runs, want 1 (slot 1 queued)", n)
				}
			case schedule.OverlapAllow:
				// Slot 1 runs (and ends) while slot 0 still runs.
				e.waitFor("slot 1 alongside slot 0", func() bool { mu.Lock(); defer mu.Unlock(); return peak == 2 })
			}
			close(block)
			want := []string{sched.ID(t0), s1}
			switch policy {
			case schedule.OverlapSkip:
				e.settle(job, sched, t0, t0.Add(time.Minute))
				want = want[:1]
			default:
				e.settle(job, sched, t0, t0.Add(time.Minute))
			}
			mu.Lock()
			defer mu.Unlock()
			if policy != schedule.OverlapAllow {
				if peak != 1 || !slices.Equal(order, want) {
					t.Fatalf("peak %d, order %v; want 1 and %v", peak, order, want)
				}
			} else if peak != 2 {
				t.Fatalf("peak %d, want 2", peak)
			}
			if n := e.count(job); n != int64(len(want)) {
				t.Fatalf("business counter = %d, want %d", n, len(want))
			}
		})
	}
}

// dstCase drives a cron job through a DST transition on the fake clock
// and checks the slot IDs and the number of runs.
type dstCase struct {
	name     string
	zone     string
	spec     string
	from, to string // RFC 3339
	restart  string // optional: restart the scheduler at this time
	want     []string
}

var dstCases = []dstCase{
	{name: "NewYork/gap/daily", zone: "America/New_York", spec: "30 2 * * *",
		from: "2026-03-07T00:00:00-05:00", to: "2026-03-09T12:00:00-04:00",
		want: []string{"2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
	{name: "NewYork/repeat/daily", zone: "America/New_York", spec: "30 1 * * *",
		from: "2026-10-31T00:00:00-04:00", to: "2026-11-02T12:00:00-05:00", restart: "2026-11-01T01:45:00-05:00",
		want: []string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
	{name: "NewYork/gap/hourly", zone: "America/New_York", spec: "0 * * * *",
		from: "2026-03-08T00:30:00-05:00", to: "2026-03-08T05:30:00-04:00",
		want: []string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00", "2026-03-08T05:00:00-04:00"}},
	{name: "NewYork/repeat/hourly", zone: "America/New_York", spec: "0 * * * *",
		from: "2026-11-01T00:30:00-04:00", to: "2026-11-01T03:30:00-05:00", restart: "2026-11-01T01:30:00-05:00",
		want: []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
	{name: "LordHowe/gap/daily", zone: "Australia/Lord_Howe", spec: "15 2 * * *",
		from: "2026-10-03T00:00:00+10:30", to: "2026-10-05T12:00:00+11:00",
		want: []string{"2026-10-03T02:15:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
	{name: "LordHowe/repeat/daily", zone: "Australia/Lord_Howe", spec: "45 1 * * *",
		from: "2026-04-04T12:00:00+11:00", to: "2026-04-06T12:00:00+10:30",
		want: []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
	{name: "LordHowe/repeat/hourly", zone: "Australia/Lord_Howe", spec: "45 * * * *",
		from: "2026-04-05T00:30:00+11:00", to: "2026-04-05T02:30:00+10:30",
		want: []string{"2026-04-05T00:45:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30"}},
	{name: "Dublin/gap/daily", zone: "Europe/Dublin", spec: "30 1 * * *",
		from: "2026-03-28T00:00:00+00:00", to: "2026-03-30T12:00:00+01:00",
		want: []string{"2026-03-28T01:30:00+00:00", "2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
	{name: "Dublin/repeat/daily", zone: "Europe/Dublin", spec: "30 1 * * *",
		from: "2026-10-24T00:00:00+01:00", to: "2026-10-26T12:00:00+00:00",
		want: []string{"2026-10-24T01:30:00+01:00", "2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"}},
}

// DSTCases returns the suite's DST cases as (zone, spec, from, to, want
// IDs) for unit tests of schedules.
func DSTCases() [][5]any {
	out := make([][5]any, len(dstCases))
	for i, c := range dstCases {
		out[i] = [5]any{c.zone, c.spec, c.from, c.to, slices.Clone(c.want)}
	}
	return out
}

func testDST(e *env) {
	for _, c := range dstCases {
		e.t.Run(c.name, func(t *testing.T) {
			e := &env{Target: e.Target, t: t}
			loc, err := time.LoadLocation(c.zone)
			if err != nil {
				t.Fatal(err)
			}
			sched, err := schedule.Cron(c.spec, loc)
			if err != nil {
				t.Fatal(err)
			}
			parse := func(s string) time.Time {
				t.Helper()
				v, err := time.Parse(time.RFC3339, s)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			from, to := parse(c.from), parse(c.to)
			job := jobName(t, "dst")
			var calls counter
			// Overlap allow: the test moves on once a slot is done, which
			// its handler records before it returns; the next slot must
			// not be skipped for a run that is ending.
			j := schedule.Job{Name: job, Schedule: sched, MisfireThreshold: 2 * time.Hour, Overlap: schedule.OverlapAllow,
				Run: e.completing(&calls)}
			e.Clock.Set(from)
			nd := e.start(e.node(), e.opts("a"), j)
			var restart time.Time
			if c.restart != "" {
				restart = parse(c.restart)
			}
			var wantTimes []time.Time
			for _, id := range c.want {
				wantTimes = append(wantTimes, parse(id))
			}
			for now := from; now.Before(to); {
				now = now.Add(15 * time.Minute)
				if !restart.IsZero() && !now.Before(restart) {
					nd.stop()
					nd = e.start(e.node(), e.opts("b"), j)
					restart = time.Time{}
				}
				e.Clock.Set(now)
				var due []time.Time
				for _, w := range wantTimes {
					if !w.After(now) {
						due = append(due, w)
					}
				}
				e.waitFor("due slots final", func() bool {
					for _, w := range due {
						r, ok := e.record(job, sched.ID(w))
						if !ok || !r.Final() {
							return false
						}
					}
					return true
				})
			}
			e.settle(job, sched, wantTimes...)
			var got []string
			for _, r := range e.records(job) {
				if r.State != schedule.Done {
					t.Errorf("slot %s is %s", r.SlotID, r.State)
				}
				got = append(got, r.SlotID)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("slots %v\nwant  %v", got, c.want)
			}
			if n := e.count(job); n != int64(len(c.want)) {
				t.Fatalf("business counter = %d, want %d", n, len(c.want))
			}
			if n, _ := calls.total(); n != len(c.want) {
				t.Fatalf("%d handler calls, want %d", n, len(c.want))
			}
		})
	}
}
