package schedule_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/memstore"
)

// A handler that runs ten times its claim's TTL keeps the claim (renewed
// every third of it) and no other node takes the slot; all on the fake
// clock of a synctest bubble, which the memory store shares.
func TestLongHandlerKeepsItsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMem(t, nil)
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
		db := newMem(t, nil)
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

func nopRun(context.Context, *schedule.Slot) error { return nil }

func newSchedulerForFuzz(t *testing.T) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(newMem(t, nil).Schedules(), &schedule.Options{Node: "fuzz"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// New refuses a nil store and options out of range, Add a job without a
// handler: errors wrapping ErrInvalid, no panic.
func TestNewAndAddRefuseBadInput(t *testing.T) {
	store := newMem(t, nil).Schedules()
	bad := map[string]*schedule.Options{
		"negative poll":        {PollInterval: -time.Second},
		"negative claim ttl":   {ClaimTTL: -time.Second},
		"claim ttl too long":   {ClaimTTL: lease.MaxTTL + time.Second},
		"claim ttl too short":  {ClaimTTL: time.Microsecond},
		"negative stop":        {StopTimeout: -time.Second},
		"negative max running": {MaxRunning: -1},
		"node not printable":   {Node: "a\nb"},
	}
	for name, o := range bad {
		if s, err := schedule.New(store, o); !errors.Is(err, schedule.ErrInvalid) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil and ErrInvalid", name, s, err)
		}
	}
	if s, err := schedule.New(nil, nil); !errors.Is(err, schedule.ErrInvalid) || s != nil {
		t.Errorf("New(nil store) = %v, %v; want nil and ErrInvalid", s, err)
	}
	s, err := schedule.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(schedule.Job{Name: "j", Schedule: schedule.Every(time.Second)}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("Add without Run: %v, want ErrInvalid", err)
	}
	if err := s.Add(schedule.Job{Name: "j", Schedule: schedule.Every(time.Second), Run: nopRun, Timeout: -1}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("Add with a negative timeout: %v, want ErrInvalid", err)
	}
}

// A handler that ends its goroutine with runtime.Goexit (as t.FailNow
// does) fails its slot for good, leaves no lease held, and the scheduler
// runs the next slot.
func TestGoexitHandlerFailsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMem(t, nil)
		every := schedule.Every(time.Minute)
		first := every.Next(time.Now())
		s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "a", ClaimTTL: 30 * time.Second, PollInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(schedule.Job{Name: "exit", Schedule: every, Run: func(ctx context.Context, sl *schedule.Slot) error {
			if sl.Time.Equal(first) {
				runtime.Goexit()
			}
			return db.CompleteSlot(ctx, sl, memstore.AddSlotValue("n", 1))
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(time.Until(first) + 90*time.Second)
		cancel()
		<-done
		r, err := s.Slot(t.Context(), "exit", every.ID(first))
		if err != nil || r.State != schedule.Failed || !r.Final() || !strings.Contains(r.Error, "Goexit") {
			t.Fatalf("record %+v, %v; want failed for good, naming Goexit", r, err)
		}
		for _, key := range []string{scheddriver.ClaimKey("exit", every.ID(first)), scheddriver.RunKey("exit")} {
			if info, err := db.Leases().Inspect(t.Context(), key); err != nil || info.Held {
				t.Errorf("%s: %+v, %v; want free", key, info, err)
			}
		}
		second := every.Next(first)
		if r, err := s.Slot(t.Context(), "exit", every.ID(second)); err != nil || r.State != schedule.Done {
			t.Fatalf("next slot %+v, %v; want done", r, err)
		}
	})
}

// While a job's slot waits at the overlap gate (here: another node holds
// the job's run lease), this node claims none of the job's newer slots:
// claimed ahead, they would wait behind it in slot order, each renewing
// its claim, and on a store slower than the job's interval their
// renewals would starve the slot that runs. Once the gate opens, the
// slots run again.
func TestNoClaimsAheadOfTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMem(t, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		every := schedule.Every(time.Second)
		done := make(chan string, 100)
		job := schedule.Job{Name: "tick", Schedule: every, Run: func(ctx context.Context, s *schedule.Slot) error {
			done <- s.ID
			return nil
		}}
		other, err := lease.New(db.Schedules().Claims(), nil)
		if err != nil {
			t.Fatal(err)
		}
		run, err := other.TryAcquire(ctx, scheddriver.RunKey(job.Name), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "a", ClaimTTL: 30 * time.Second, PollInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(job); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stopped := make(chan struct{})
		go func() { s.Run(ctx); close(stopped) }()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		var held []string
		for at := every.Next(start.Add(-time.Second)); !at.After(time.Now()); at = every.Next(at) {
			info, err := db.Schedules().Claims().Inspect(ctx, scheddriver.ClaimKey(job.Name, every.ID(at)))
			if err != nil {
				t.Fatal(err)
			}
			if info.Held {
				held = append(held, every.ID(at))
			}
		}
		if len(held) != 1 {
			t.Fatalf("claims held while the gate is closed: %q, want one (the oldest waiting slot's)", held)
		}
		if len(done) != 0 {
			t.Fatalf("a slot ran while another node held the run lease")
		}
		if err := run.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if len(done) == 0 {
			t.Fatal("no slot ran after the run lease was released")
		}
		cancel()
		<-stopped
	})
}
