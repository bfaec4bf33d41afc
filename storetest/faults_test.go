package storetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/storetest"
)

func TestFaults(t *testing.T) {
	ctx := t.Context()
	ms, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := storetest.NewFaults()
	s := f.Leases(ms.Leases())
	tok := lease.NewToken()

	// Cut: the call fails with ErrUnavailable and reaches nothing.
	f.Cut()
	if !f.IsCut() {
		t.Fatal("IsCut after Cut = false")
	}
	if _, err := s.Acquire(ctx, "k", tok, time.Minute); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire while cut: %v, want ErrUnavailable", err)
	}
	if info, _ := ms.Leases().Inspect(ctx, "k"); info.Held {
		t.Fatalf("a cut call reached the store: %+v", info)
	}

	// DropReplies: the call applies, its reply is lost.
	f.DropReplies()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = s.Acquire(short, "k", tok, time.Minute)
	cancel()
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire with its reply lost: %v, want ErrUnavailable", err)
	}
	if info, _ := ms.Leases().Inspect(ctx, "k"); !info.Held {
		t.Fatal("a call whose reply was lost did not apply")
	}

	// Pause: calls wait until Resume (or their context ends).
	f.Heal()
	f.Pause()
	done := make(chan error, 1)
	go func() { done <- s.Release(ctx, "k", tok) }()
	select {
	case err := <-done:
		t.Fatalf("Release returned while paused: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if info, _ := ms.Leases().Inspect(ctx, "k"); !info.Held {
		t.Fatal("a paused call reached the store")
	}
	f.Resume()
	if err := <-done; err != nil {
		t.Fatalf("Release after Resume: %v", err)
	}
	f.Pause()
	short, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
	_, err = s.Inspect(short, "k")
	cancel()
	if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Inspect paused past its deadline: %v", err)
	}
	f.Heal()

	// Delay: a call whose context ends during the delay fails.
	f.Delay(time.Hour)
	short, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
	_, err = s.Inspect(short, "k")
	cancel()
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Inspect delayed past its deadline: %v", err)
	}
	f.Heal()
	if _, err := s.Inspect(ctx, "k"); err != nil {
		t.Fatalf("Inspect after Heal: %v", err)
	}
}

func TestSchedulesFaults(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock(time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC))
	ms, err := memstore.New(&memstore.Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := storetest.NewFaults().Schedules(ms.Schedules())
	if now, err := s.Now(ctx); err != nil || !now.Equal(clock.Now()) {
		t.Fatalf("Now = %v, %v; want %v", now, err, clock.Now())
	}
	s.Cut()
	_, err = s.Now(ctx)
	if !errors.Is(err, schedule.ErrUnavailable) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Now while cut: %v", err)
	}
	if _, err := s.Claims().Inspect(ctx, "k"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("claims Inspect while cut: %v", err)
	}
	if s.Polls() != 2 {
		t.Fatalf("Polls = %d, want 2", s.Polls())
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC)
	c := storetest.NewClock(start)
	var seen []time.Time
	c.Follow(func(now time.Time) { seen = append(seen, now) })
	c.Advance(time.Second)
	c.Set(start)
	c.Tick(time.Millisecond)
	if a, b := c.Now(), c.Now(); !a.Equal(start) || !b.Equal(start.Add(time.Millisecond)) {
		t.Fatalf("ticking readings %v, %v", a, b)
	}
	want := []time.Time{start, start.Add(time.Second), start, start.Add(time.Millisecond), start.Add(2 * time.Millisecond)}
	if len(seen) != len(want) {
		t.Fatalf("followed %v, want %v", seen, want)
	}
	for i := range want {
		if !seen[i].Equal(want[i]) {
			t.Fatalf("followed %v, want %v", seen, want)
		}
	}
}
