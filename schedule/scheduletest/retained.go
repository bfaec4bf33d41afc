package scheduletest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Retained reaches what a store keeps of slots, for the case that checks
// a slot record is kept while it is not final, for the schedule retention
// once it is final, and always while it is its job's latest, and that the
// slot's ledger row and attempt history go with it (docs/operations.md,
// "Retention: nothing grows without bound").
type Retained struct {
	// Reclaim lets the store drop what is past retention (the schedule
	// retention; zero means the store's default,
	// retention.DefaultScheduleRetention) before the call, the way it does
	// that on its own: its sweep (SQLite, PostgreSQL). The case calls it
	// again until the records are gone or its deadline passes.
	Reclaim func(t *testing.T, retention time.Duration)
	// Stored returns the slot IDs of job for which the store physically
	// holds a slot record, a ledger row and an attempt history, each
	// sorted.
	Stored func(t *testing.T, job string) Stored
}

// Stored is what a store holds for one job's slots: the slot IDs of each
// kind of record.
type Stored struct {
	Slots, Ledger, Attempts []string
}

func (s Stored) String() string {
	return fmt.Sprintf("%d slot records %q, %d ledger rows %q, %d attempt histories %q",
		len(s.Slots), s.Slots, len(s.Ledger), s.Ledger, len(s.Attempts), s.Attempts)
}

func (s Stored) equal(o Stored) bool {
	return slices.Equal(s.Slots, o.Slots) && slices.Equal(s.Ledger, o.Ledger) && slices.Equal(s.Attempts, o.Attempts)
}

// only returns the IDs of ids that are in keep.
func only(ids []string, keep map[string]bool) []string {
	out := []string{}
	for _, id := range ids {
		if keep[id] {
			out = append(out, id)
		}
	}
	return out
}

// testRecordsGoAfterRetention: final slot records of many slots (done,
// done after a takeover, failed for good, missed, skipped) go once they
// have been final for the schedule retention and the store reclaimed
// them, with their ledger rows and attempt histories; records that are
// not final (running, failed with a retry pending), each job's latest
// record, and records final for less than the retention are kept, with
// theirs, and the store still answers for them.
func testRecordsGoAfterRetention(e *env) {
	t, ctx, s := e.t, ctxT(e.t), e.Store
	if e.Retained == nil || e.Retained.Reclaim == nil || e.Retained.Stored == nil {
		t.Skip("scheduletest: the Target does not reach what the store keeps of finished slots (Retained)")
	}
	r := e.Retained
	const jobs, slots, running, retrying = 3, 30, 10, 20
	var fence uint64
	next := func() uint64 { fence++; return fence }
	base := e.now().Add(-time.Hour).Truncate(time.Millisecond)
	type job struct {
		name   string
		stored Stored // expected before reclaiming: Attempts holds the slots begun
		keep   map[string]bool
		times  map[string]time.Time
	}
	begin := func(j *job, id string, at time.Time, f uint64, node string) schedule.Record {
		t.Helper()
		rec, err := s.Begin(ctx, scheddriver.BeginRequest{Job: j.name, SlotID: id, SlotTime: at, Node: node, Fence: f})
		if err != nil || rec.State != schedule.Running {
			t.Fatalf("Begin(%s %s) = %+v, %v", j.name, id, rec, err)
		}
		return rec
	}
	finish := func(j *job, id string, f uint64, state schedule.State, retry time.Duration) {
		t.Helper()
		req := scheddriver.FinishRequest{Job: j.name, SlotID: id, Fence: f, State: state, RetryAfter: retry}
		if state == schedule.Failed {
			req.Error = "boom"
		}
		rec, err := s.Finish(ctx, req)
		if err != nil || rec.State != state || rec.Final() != (retry == 0) {
			t.Fatalf("Finish(%s %s, %s) = %+v, %v", j.name, id, state, rec, err)
		}
	}
	// write records slot i of j in one of the states, the latest one done.
	write := func(j *job, i int, at time.Time) {
		t.Helper()
		id := fmt.Sprintf("s%03d", i)
		j.times[id] = at
		j.stored.Slots = append(j.stored.Slots, id)
		switch {
		case i == running:
			begin(j, id, at, next(), "n1")
			j.stored.Attempts = append(j.stored.Attempts, id)
			j.keep[id] = true
			return
		case i == retrying:
			f := next()
			begin(j, id, at, f, "n1")
			finish(j, id, f, schedule.Failed, time.Hour)
			j.stored.Attempts = append(j.stored.Attempts, id)
			j.keep[id] = true
			return
		}
		switch i % 6 {
		case 0, 5: // done
			f := next()
			begin(j, id, at, f, "n1")
			finish(j, id, f, schedule.Done, 0)
			j.stored.Ledger = append(j.stored.Ledger, id)
			j.stored.Attempts = append(j.stored.Attempts, id)
		case 1: // done after another node took over
			begin(j, id, at, next(), "n1")
			f := next()
			if rec := begin(j, id, at, f, "n2"); rec.Attempts != 2 {
				t.Fatalf("takeover Begin = %+v, want attempt 2", rec)
			}
			finish(j, id, f, schedule.Done, 0)
			j.stored.Ledger = append(j.stored.Ledger, id)
			j.stored.Attempts = append(j.stored.Attempts, id)
		case 2: // failed for good
			f := next()
			begin(j, id, at, f, "n1")
			finish(j, id, f, schedule.Failed, 0)
			j.stored.Attempts = append(j.stored.Attempts, id)
		case 3:
			rec, wrote, err := s.Mark(ctx, scheddriver.MarkRequest{Job: j.name, SlotID: id, SlotTime: at, Node: "n1", State: schedule.Missed, Reason: "late"})
			if err != nil || !wrote || rec.State != schedule.Missed {
				t.Fatalf("Mark(%s %s) = %+v, %v, %v", j.name, id, rec, wrote, err)
			}
		case 4:
			rec, err := s.Begin(ctx, scheddriver.BeginRequest{Job: j.name, SlotID: id, SlotTime: at, Node: "n1", Fence: next(), Skip: true, Reason: "overlap"})
			if err != nil || rec.State != schedule.Skipped {
				t.Fatalf("Begin skip(%s %s) = %+v, %v", j.name, id, rec, err)
			}
		}
	}
	var all []*job
	for n := range jobs {
		j := &job{name: jobName(t, fmt.Sprint(n)), keep: map[string]bool{}, times: map[string]time.Time{}}
		for i := range slots {
			write(j, i, base.Add(time.Duration(i)*time.Second))
		}
		j.keep[fmt.Sprintf("s%03d", slots-1)] = true // the latest
		all = append(all, j)
	}
	// What the store holds now: every record, its ledger row if done, and
	// an attempt history at least for each slot begun (a store may keep
	// one for other slots too).
	check := func(what string, j *job, want Stored) {
		t.Helper()
		got := r.Stored(t, j.name)
		if !slices.Equal(got.Slots, want.Slots) || !slices.Equal(got.Ledger, want.Ledger) {
			t.Fatalf("%s, the store holds for job %s: %v\nwant %v", what, j.name, got, want)
		}
		if !containsAll(got.Attempts, want.Attempts) {
			t.Fatalf("%s, the store holds for job %s: %v\nwant attempt histories for at least %q", what, j.name, got, want.Attempts)
		}
	}
	for _, j := range all {
		check("after writing", j, j.stored)
		j.stored.Attempts = r.Stored(t, j.name).Attempts
	}
	// Within the retention nothing goes.
	var young *job
	if e.fake() {
		e.Clock.Advance(30*24*time.Hour - time.Hour) // the default retention, less an hour
		r.Reclaim(t, 0)
	} else {
		r.Reclaim(t, time.Hour)
	}
	for _, j := range all {
		check("reclaimed within the retention", j, j.stored)
	}
	retention, ended := time.Duration(0), e.now()
	if e.fake() {
		// Final for less than the retention, not the latest: kept.
		young = &job{name: jobName(t, "young"), keep: map[string]bool{}, times: map[string]time.Time{}}
		at := e.now().Add(-time.Minute).Truncate(time.Millisecond)
		for i := range 4 {
			write(young, 6*i, at.Add(time.Duration(i)*time.Second)) // done
		}
		for id := range young.times {
			young.keep[id] = true
		}
		young.stored.Attempts = r.Stored(t, young.name).Attempts
		e.Clock.Advance(2 * time.Hour)
	} else {
		// Short on a real clock: wait until it has passed on the store's.
		retention = 200 * time.Millisecond
		e.waitFor("the retention to pass on the store's clock", func() bool { return e.now().Sub(ended) > retention })
	}
	want := func(j *job) Stored {
		return Stored{Slots: only(j.stored.Slots, j.keep), Ledger: only(j.stored.Ledger, j.keep), Attempts: only(j.stored.Attempts, j.keep)}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		r.Reclaim(t, retention)
		var bad *job
		var got Stored
		for _, j := range all {
			if got = r.Stored(t, j.name); !got.equal(want(j)) {
				bad = j
				break
			}
		}
		if bad == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the retention of %d final slot records passed and the store reclaimed them, it holds for job %s: %v\nwant %v", jobs*(slots-3), bad.name, got, want(bad))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if young != nil {
		if got := r.Stored(t, young.name); !got.equal(young.stored) {
			t.Fatalf("records final for less than the retention: the store holds %v\nwant %v", got, young.stored)
		}
	}
	// The store answers for what it kept, and knows nothing of the rest.
	for _, j := range all {
		for _, id := range j.stored.Slots {
			_, err := s.Slot(ctx, j.name, id)
			switch {
			case j.keep[id] && err != nil:
				t.Fatalf("Slot(%s %s), kept: %v", j.name, id, err)
			case !j.keep[id] && !errors.Is(err, schedule.ErrNotFound):
				t.Fatalf("Slot(%s %s), reclaimed: %v, want ErrNotFound", j.name, id, err)
			}
		}
		var ids []string
		for _, rec := range e.records(j.name) {
			ids = append(ids, rec.SlotID)
		}
		if want := want(j).Slots; !slices.Equal(ids, want) {
			t.Fatalf("Slots(%s) after reclaiming = %q, want %q", j.name, ids, want)
		}
		latest := fmt.Sprintf("s%03d", slots-1)
		if last, ok, err := s.Last(ctx, j.name); err != nil || !ok || !last.Equal(j.times[latest]) {
			t.Fatalf("Last(%s) after reclaiming = %v, %v, %v; want the latest slot's time %v", j.name, last, ok, err, j.times[latest])
		}
		un, err := s.Unfinished(ctx, j.name, 10)
		if err != nil || len(un) != 2 || un[0].SlotID != fmt.Sprintf("s%03d", running) || un[1].SlotID != fmt.Sprintf("s%03d", retrying) {
			t.Fatalf("Unfinished(%s) after reclaiming = %+v, %v; want the running and the retrying slot", j.name, un, err)
		}
		if rec, err := s.Slot(ctx, j.name, latest); err != nil || rec.State != schedule.Done || len(rec.History) == 0 {
			t.Fatalf("the latest slot after reclaiming: %+v, %v; want it done, with its history", rec, err)
		}
	}
}

func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}
