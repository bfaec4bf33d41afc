package schedule_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/memstore"
)

// A handler that runs ten times its claim's TTL keeps the claim (renewed
// every third of it) and no other node takes the slot; all on the fake
// clock of a synctest bubble, which the memory store shares.
func TestLongHandlerKeepsItsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := memstore.New(nil)
		const ttl = 30 * time.Second
		calls := 0
		job := schedule.Job{Name: "long", Schedule: schedule.Every(time.Hour), Overlap: schedule.OverlapAllow,
			Run: func(ctx context.Context, s *schedule.Slot) error {
				calls++
				select {
				case <-time.After(10 * ttl):
					return db.CompleteSlot(ctx, s, memstore.AddSlotValue("n", 1))
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}}
		ctx, cancel := context.WithCancel(t.Context())
		var nodes []chan struct{}
		for _, name := range []string{"a", "b"} {
			s, err := schedule.New(db.Schedules(), &schedule.Options{Node: name, ClaimTTL: ttl, PollInterval: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add(job); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			nodes = append(nodes, done)
		}
		time.Sleep(time.Hour + 20*ttl)
		cancel()
		for _, d := range nodes {
			<-d
		}
		at := schedule.Every(time.Hour).Next(time.Now().Add(-time.Hour - 20*ttl))
		r, err := db.Schedules().Slot(t.Context(), "long", schedule.Every(time.Hour).ID(at))
		if err != nil || r.State != schedule.Done || r.Attempts != 1 || calls != 1 {
			t.Fatalf("record %+v, %v, %d calls; want done in one attempt", r, err, calls)
		}
	})
}

// A node cut off from its store stops its handler (cause lease.ErrLost)
// before the claim expires on the store.
func TestCutNodeStopsBeforeClaimExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := memstore.New(nil)
		faulty := scheduletest.NewFaulty(db.Schedules())
		const ttl = 30 * time.Second
		var cause error
		var stoppedAt time.Time
		started := make(chan time.Time, 1)
		s, err := schedule.New(faulty, &schedule.Options{Node: "a", ClaimTTL: ttl, PollInterval: time.Second, StopTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(schedule.Job{Name: "cut", Schedule: schedule.Every(time.Hour),
			Run: func(ctx context.Context, sl *schedule.Slot) error {
				started <- time.Now()
				faulty.Cut()
				<-ctx.Done()
				cause, stoppedAt = context.Cause(ctx), time.Now()
				return ctx.Err()
			}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		begun := <-started
		time.Sleep(2 * ttl)
		cancel()
		<-done
		if !errors.Is(cause, lease.ErrLost) {
			t.Fatalf("handler's context cause %v, want lease.ErrLost", cause)
		}
		if d := stoppedAt.Sub(begun); d >= ttl || d < ttl/2 {
			t.Fatalf("handler stopped %v after it began; want before the %v claim expires", d, ttl)
		}
	})
}
