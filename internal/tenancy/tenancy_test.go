package tenancy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	errGone    = errors.New("gone")
	errExpired = errors.New("expired")
	errDown    = errors.New("store down")
)

// fakeStore answers renewals after a delay, with a granted ttl or an error.
type fakeStore struct {
	mu    sync.Mutex
	delay time.Duration
	ttl   time.Duration
	err   error
	sent  []time.Time
}

func (f *fakeStore) renew(ctx context.Context) (time.Duration, error) {
	f.mu.Lock()
	f.sent = append(f.sent, time.Now())
	d, ttl, err := f.delay, f.ttl, f.err
	f.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return ttl, err
}

func (f *fakeStore) set(ttl time.Duration, err error) {
	f.mu.Lock()
	f.ttl, f.err = ttl, err
	f.mu.Unlock()
}

func (f *fakeStore) renewals() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sent)
}

func config(f *fakeStore, ttl time.Duration) Config {
	return Config{
		Token: "tok", Fence: 7, TTL: ttl, Margin: DefaultMargin, Renew: f.renew,
		Lost: func(err error) error {
			if errors.Is(err, errGone) {
				return fmt.Errorf("lost: %w", err)
			}
			return nil
		},
		Expired: errExpired,
	}
}

func TestMarginRule(t *testing.T) {
	for _, c := range []struct {
		m    Margin
		ttl  time.Duration
		want time.Duration
	}{
		{DefaultMargin, 10 * time.Second, 100*time.Millisecond + 2*time.Millisecond},
		{DefaultMargin, 4 * time.Millisecond, 40*time.Microsecond + time.Millisecond}, // fixed part capped at ttl/4
		{Margin{DriftFactor: 0.1, Fixed: time.Second}, 10 * time.Second, 2 * time.Second},
		{Margin{}, time.Second, 0},
	} {
		if got := c.m.Of(c.ttl); got != c.want {
			t.Errorf("%+v.Of(%v) = %v, want %v", c.m, c.ttl, got, c.want)
		}
	}
}

func TestValidityFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{ttl: time.Second}
		sent := time.Now()
		time.Sleep(300 * time.Millisecond) // the reply took 300ms
		g := New(config(f, time.Second), sent, time.Second)
		want := sent.Add(time.Second - DefaultMargin.Of(time.Second))
		if got := g.ValidUntil(); !got.Equal(want) {
			t.Fatalf("ValidUntil = %v, want %v (send time + ttl - margin)", got, want)
		}
		time.Sleep(time.Until(want) - time.Nanosecond)
		synctest.Wait()
		select {
		case <-g.Done():
			t.Fatal("Done closed before the validity ran out")
		default:
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case <-g.Done():
		default:
			t.Fatal("Done not closed when the validity ran out")
		}
		if !errors.Is(g.Err(), errExpired) || !g.Lost() {
			t.Fatalf("Err = %v, Lost = %v; want the expiry error, lost", g.Err(), g.Lost())
		}
		if err := g.Renew(t.Context()); !errors.Is(err, errExpired) || f.renewals() != 0 {
			t.Fatalf("Renew after expiry = %v with %d requests; want the expiry error, none sent", err, f.renewals())
		}
	})
}

func TestRenewExtendsFromItsSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{ttl: 2 * time.Second, delay: 200 * time.Millisecond}
		g := New(config(f, time.Second), time.Now(), time.Second)
		time.Sleep(500 * time.Millisecond)
		sent := time.Now()
		if err := g.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The granted ttl (2s) counts, from the send time, not the reply.
		if got, want := g.ValidUntil(), sent.Add(2*time.Second-DefaultMargin.Of(2*time.Second)); !got.Equal(want) {
			t.Fatalf("ValidUntil = %v, want %v", got, want)
		}
	})
}

func TestFailedRenewalDoesNotExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{err: errDown}
		g := New(config(f, time.Second), time.Now(), time.Second)
		before := g.ValidUntil()
		time.Sleep(100 * time.Millisecond)
		if err := g.Renew(t.Context()); !errors.Is(err, errDown) {
			t.Fatalf("Renew = %v, want the store's error", err)
		}
		if got := g.ValidUntil(); !got.Equal(before) || g.Err() != nil {
			t.Fatalf("after a failed renewal: ValidUntil %v (was %v), Err %v", got, before, g.Err())
		}
	})
}

func TestRefusedRenewalLoses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{err: errGone}
		var onLost []error
		c := config(f, time.Second)
		c.OnLost = func(err error) { onLost = append(onLost, err) }
		g := New(c, time.Now(), time.Second)
		err := g.Renew(t.Context())
		if !errors.Is(err, errGone) || !g.Lost() || len(onLost) != 1 {
			t.Fatalf("Renew = %v, Lost %v, OnLost calls %v", err, g.Lost(), onLost)
		}
		<-g.Done()
		g.End(errors.New("released")) // no effect once ended
		if !errors.Is(g.Err(), errGone) || len(onLost) != 1 {
			t.Fatalf("Err %v after End; OnLost calls %v", g.Err(), onLost)
		}
	})
}

func TestRenewalInFlightWhenValidityRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{ttl: time.Second, delay: 2 * time.Second}
		g := New(config(f, time.Second), time.Now(), time.Second)
		// The request is cut at the validity; the grant ends on its own.
		err := g.Renew(context.Background())
		if !errors.Is(err, errExpired) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("Renew = %v", err)
		}
		f.mu.Lock()
		f.delay = 0
		f.mu.Unlock()
		time.Sleep(2 * time.Second)
		if !errors.Is(g.Err(), errExpired) {
			t.Fatalf("Err = %v, want the expiry error", g.Err())
		}
	})
}

func TestEndIsNotLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		called := false
		c := config(&fakeStore{}, time.Second)
		c.OnLost = func(error) { called = true }
		g := New(c, time.Now(), time.Second)
		released := errors.New("released")
		if err := g.End(released); err != released || g.Lost() || called {
			t.Fatalf("End = %v, Lost %v, OnLost called %v", err, g.Lost(), called)
		}
		time.Sleep(2 * time.Second) // the validity timer was stopped
		if g.Err() != released {
			t.Fatalf("Err = %v", g.Err())
		}
	})
}

func TestGroupRenewsEveryThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{ttl: 3 * time.Second}
		g := New(config(f, 3*time.Second), time.Now(), 3*time.Second)
		k := NewGroup(t.Context(), nil, "test")
		start := time.Now()
		k.Add(g)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		sent := append([]time.Time(nil), f.sent...)
		f.mu.Unlock()
		if len(sent) != 10 {
			t.Fatalf("%d renewals in 10s of a 3s ttl, want 10", len(sent))
		}
		for i, s := range sent {
			if want := start.Add(time.Duration(i+1) * time.Second); !s.Equal(want) {
				t.Fatalf("renewal %d sent at %v, want %v", i, s.Sub(start), want.Sub(start))
			}
		}
		if g.Err() != nil || k.Context().Err() != nil {
			t.Fatalf("Err %v, group context %v", g.Err(), k.Context().Err())
		}
		k.Stop()
		n := f.renewals()
		time.Sleep(10 * time.Second)
		if f.renewals() != n {
			t.Fatal("renewed after Stop")
		}
		if !errors.Is(context.Cause(k.Context()), context.Canceled) {
			t.Fatalf("cause after Stop = %v", context.Cause(k.Context()))
		}
		g.End(errors.New("released"))
	})
}

func TestGroupBacksOffAndRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{err: errDown}
		g := New(config(f, time.Second), time.Now(), time.Second)
		until := g.ValidUntil()
		k := NewGroup(t.Context(), nil, "test")
		defer k.Stop()
		k.Add(g)
		<-k.Context().Done()
		if !errors.Is(context.Cause(k.Context()), errExpired) {
			t.Fatalf("cause = %v, want the expiry error", context.Cause(k.Context()))
		}
		if !time.Now().Equal(until) {
			t.Fatalf("group context ended at %v, validity was %v", time.Now(), until)
		}
		// First renewal at ttl/3, then retries from ttl/10 backing off:
		// more than one, fewer than one per ttl/10.
		if n := f.renewals(); n < 2 || n > 7 {
			t.Fatalf("%d renewal attempts before the validity ran out", n)
		}
		f.mu.Lock()
		sent := append([]time.Time(nil), f.sent...)
		f.mu.Unlock()
		for i := 2; i < len(sent); i++ {
			if sent[i].Sub(sent[i-1]) < 50*time.Millisecond {
				t.Fatalf("retries %v apart", sent[i].Sub(sent[i-1]))
			}
		}
	})
}

func TestGroupManyGrantsOneLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fa, fb := &fakeStore{ttl: 3 * time.Second}, &fakeStore{ttl: 600 * time.Millisecond}
		a := New(config(fa, 3*time.Second), time.Now(), 3*time.Second)
		b := New(config(fb, 600*time.Millisecond), time.Now(), 600*time.Millisecond)
		k := NewGroup(t.Context(), nil, "test")
		defer k.Stop()
		k.Add(a)
		k.Add(b)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if fa.renewals() != 3 || fb.renewals() != 15 {
			t.Fatalf("renewals %d and %d, want 3 and 15 (each every third of its own ttl)", fa.renewals(), fb.renewals())
		}
		// Removing b stops its renewals; a is still kept alive.
		k.Remove(b)
		b.End(errors.New("released"))
		nb := fb.renewals()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if fb.renewals() != nb || fa.renewals() != 6 {
			t.Fatalf("after Remove: b %d (was %d), a %d", fb.renewals(), nb, fa.renewals())
		}
		if k.Context().Err() != nil {
			t.Fatal("a released member ended the group's context")
		}
		// Losing a ends the group's context with a's error.
		fa.set(0, errGone)
		<-k.Context().Done()
		if !errors.Is(context.Cause(k.Context()), errGone) || !a.Lost() {
			t.Fatalf("cause %v, a lost %v", context.Cause(k.Context()), a.Lost())
		}
		k.Stop()
	})
}

func TestGroupParentCancelAndNoLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeStore{ttl: time.Second}
		g := New(config(f, time.Second), time.Now(), time.Second)
		k := NewGroup(ctx, nil, "test")
		k.Add(g)
		cancel()
		<-k.Context().Done()
		// Renewals go on under a cancelled parent until Stop.
		time.Sleep(time.Second)
		if f.renewals() == 0 || g.Err() != nil {
			t.Fatalf("renewals %d, Err %v", f.renewals(), g.Err())
		}
		k.Stop()
		k.Stop() // twice is fine
		g.End(errors.New("released"))
		// synctest.Test fails if a goroutine of the bubble is left behind.
	})
}

func TestBackoff(t *testing.T) {
	for attempt := 1; attempt < 40; attempt++ {
		d := Backoff(10*time.Millisecond, time.Second, attempt)
		full := min(10*time.Millisecond<<min(attempt-1, 20), time.Second)
		if d < full/2 || d > full {
			t.Fatalf("Backoff attempt %d = %v, want in [%v, %v]", attempt, d, full/2, full)
		}
	}
}

// A grant whose reply came late (its request waited at the store) is
// renewed a third of its ttl after the request was sent, at once when that
// is past, so that its validity does not run out before the first renewal.
func TestGroupRenewsALateGrantEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{ttl: 3 * time.Second}
		sent := time.Now()
		time.Sleep(1500 * time.Millisecond) // the reply took 1.5s
		g := New(config(f, 3*time.Second), sent, 3*time.Second)
		k := NewGroup(t.Context(), nil, "test")
		defer k.Stop()
		k.Add(g)
		synctest.Wait()
		f.mu.Lock()
		got := append([]time.Time(nil), f.sent...)
		f.mu.Unlock()
		if len(got) != 1 || !got[0].Equal(sent.Add(1500*time.Millisecond)) {
			t.Fatalf("renewals %v after a reply 1.5s late, want one at once", got)
		}
		// The next follows a third of the ttl after that renewal was sent.
		time.Sleep(time.Second)
		synctest.Wait()
		if n := f.renewals(); n != 2 {
			t.Fatalf("%d renewals a third of the ttl later, want 2", n)
		}
		g.End(errors.New("released"))
	})
}
