package schedule_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/schedule"
)

// Slots are counted by job and state: a job that succeeds every hour, and
// one that fails once, is retried, then fails for good.
func TestTelemetryCountsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := obstest.New()
		var logs bytes.Buffer
		db := newMem(t, nil)
		s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "a", PollInterval: time.Second,
			MeterProvider: tl.Meter, TracerProvider: tl.Tracer, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		var spanInHandler bool
		ok := schedule.Job{Name: "report", Schedule: schedule.Every(time.Hour),
			Run: func(ctx context.Context, sl *schedule.Slot) error {
				spanInHandler = true
				return nil
			}}
		bad := schedule.Job{Name: "sync", Schedule: schedule.Every(time.Hour), Retry: schedule.Retry{Attempts: 2, Backoff: time.Second},
			Run: func(ctx context.Context, sl *schedule.Slot) error { return errors.New("upstream down") }}
		for _, j := range []schedule.Job{ok, bad} {
			if err := s.Add(j); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(2*time.Hour + time.Minute)
		cancel()
		<-done
		if !spanInHandler {
			t.Fatal("the handler never ran")
		}
		for _, c := range []struct {
			job, state string
			want       int64
		}{
			{"report", "done", 2}, {"report", "failed", 0},
			{"sync", "retried", 2}, {"sync", "failed", 2}, {"sync", "done", 0},
		} {
			if got := tl.Count(t, "tenure.schedule.slots", map[string]string{"store": "memstore", "job": c.job, "state": c.state}); got != c.want {
				t.Errorf("schedule.slots{job=%s,state=%s} = %d, want %d", c.job, c.state, got, c.want)
			}
		}
		// The claims are leases: counted and timed on the same provider.
		if got := tl.Count(t, "tenure.lease.acquires", map[string]string{"outcome": "granted"}); got < 4 {
			t.Errorf("lease.acquires{granted} = %d, want at least 4", got)
		}
		if !slices.Contains(tl.SpanNames(), "tenure.schedule.slot") {
			t.Errorf("no slot span in %q", tl.SpanNames())
		}
		// The scheduler's own store calls are timed too.
		for _, op := range []string{"schedule.begin", "schedule.finish", "schedule.register", "schedule.now"} {
			if n := tl.Observations(t, "tenure.store.duration", map[string]string{"store": "memstore", "op": op, "outcome": "ok"}); n == 0 {
				t.Errorf("store.duration{op=%s,outcome=ok} has no observations", op)
			}
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "attempt failed") {
			t.Errorf("failed attempts not logged as warnings")
		}
	})
}

// Slots missed under MisfireSkip while no node ran are counted and
// logged, one record each.
func TestTelemetryCountsMissedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := obstest.New()
		var logs bytes.Buffer
		db := newMem(t, nil)
		run := func(d time.Duration) {
			s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "a", PollInterval: time.Second,
				MeterProvider: tl.Meter, TracerProvider: tl.Tracer, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Add(schedule.Job{Name: "nightly", Schedule: schedule.Every(time.Hour), Misfire: schedule.MisfireSkip,
				Run: func(context.Context, *schedule.Slot) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			time.Sleep(d)
			cancel()
			<-done
		}
		run(time.Hour + time.Minute) // one slot done
		time.Sleep(3 * time.Hour)    // every node down: these slots are late
		run(time.Minute)
		missed := tl.Count(t, "tenure.schedule.slots", map[string]string{"store": "memstore", "job": "nightly", "state": "missed"})
		if missed == 0 {
			t.Fatalf("no missed slot counted; logs: %s", logs.String())
		}
		if got := int64(strings.Count(logs.String(), "slot missed")); got != missed {
			t.Errorf("%d missed slots logged, %d counted", got, missed)
		}
		if got := tl.Count(t, "tenure.schedule.slots", map[string]string{"job": "nightly", "state": "done"}); got < 1 {
			t.Errorf("done slots = %d, want at least 1", got)
		}
	})
}
