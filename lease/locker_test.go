package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
)

// The tests run inside synctest bubbles: memstore's default clock and the
// Locker's timers both use the bubble's fake time, so expiry is exact and no
// test sleeps for real.

func TestValidityEndsBeforeStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil).Leases()
		lk := lease.New(s, nil)
		start := time.Now()
		l, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Default margin: 1% of the TTL plus 2ms.
		if want := start.Add(time.Second - 12*time.Millisecond); !l.ValidUntil().Equal(want) {
			t.Fatalf("ValidUntil = %v, want %v", l.ValidUntil(), want)
		}
		<-l.Done()
		if got := time.Since(start); got != 988*time.Millisecond {
			t.Fatalf("Done closed after %v, want 988ms", got)
		}
		if !errors.Is(l.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrLost", l.Err())
		}
		info, err := s.Inspect(t.Context(), "k")
		if err != nil || !info.Held {
			t.Fatalf("store should still hold the lease when Done closes: %+v %v", info, err)
		}
	})
}

func TestRenewMovesValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := lease.New(memstore.New(nil).Leases(), nil)
		l, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(900 * time.Millisecond)
		if err := l.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(900 * time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("renewed lease ended: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
		if !errors.Is(l.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrLost after the renewed validity", l.Err())
		}
		if err := l.Renew(t.Context()); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Renew after validity: %v, want ErrLost", err)
		}
	})
}

func TestAcquireWaitsForHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := lease.New(memstore.New(nil).Leases(), nil)
		a, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b, err := lk.Acquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The waiter sleeps no longer than the holder's remaining TTL.
		if waited := time.Since(start); waited < time.Second || waited > 1100*time.Millisecond {
			t.Fatalf("waited %v for a 1s holder", waited)
		}
		if b.Fence() <= a.Fence() {
			t.Fatalf("fence %d not above %d", b.Fence(), a.Fence())
		}
	})
}

func TestAcquireGivesUpWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := lease.New(memstore.New(nil).Leases(), nil)
		if _, err := lk.TryAcquire(t.Context(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := lk.Acquire(ctx, "k", time.Second)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("err = %v, want DeadlineExceeded and ErrHeld", err)
		}
		var held *lease.HeldError
		if !errors.As(err, &held) || held.TTL <= 0 {
			t.Fatalf("no HeldError with the holder's TTL in %v", err)
		}
	})
}

func TestTryAcquireHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := lease.New(memstore.New(nil).Leases(), nil)
		if _, err := lk.TryAcquire(t.Context(), "k", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		_, err := lk.TryAcquire(t.Context(), "k", time.Second)
		var held *lease.HeldError
		if !errors.As(err, &held) || held.TTL != 6*time.Second || held.Key != "k" {
			t.Fatalf("err = %#v, want HeldError{k, 6s}", err)
		}
	})
}

func TestDoKeepsAliveAndReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil).Leases()
		lk := lease.New(s, nil)
		var fence uint64
		err := lk.Do(t.Context(), "k", time.Second, func(ctx context.Context, l *lease.Lease) error {
			fence = l.Fence()
			for range 20 {
				time.Sleep(500 * time.Millisecond)
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				if info, _ := s.Inspect(ctx, "k"); !info.Held || info.Fence != fence {
					return fmt.Errorf("not held: %+v", info)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		info, _ := s.Inspect(t.Context(), "k")
		if info.Held || info.Fence != fence {
			t.Fatalf("after Do: %+v", info)
		}
	})
}

func TestDoReturnsFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil).Leases()
		boom := errors.New("boom")
		err := lease.New(s, nil).Do(t.Context(), "k", time.Second, func(context.Context, *lease.Lease) error { return boom })
		if err != boom {
			t.Fatalf("Do = %v, want fn's error", err)
		}
		if info, _ := s.Inspect(t.Context(), "k"); info.Held {
			t.Fatal("Do left the lease held after fn failed")
		}
	})
}

// faulty applies requests to a memstore and can lose replies or refuse.
type faulty struct {
	lease.Store
	dropAcquires atomic.Int32 // replies of the next n acquires are lost
	refuseRenew  atomic.Bool
	acquires     atomic.Int32
}

func (f *faulty) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	f.acquires.Add(1)
	g, err := f.Store.Acquire(ctx, key, token, ttl)
	if f.dropAcquires.Add(-1) >= 0 {
		return lease.Grant{}, fmt.Errorf("%w: reply lost", lease.ErrUnavailable)
	}
	return g, err
}

func (f *faulty) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if f.refuseRenew.Load() {
		return lease.Grant{}, fmt.Errorf("%w: unreachable", lease.ErrUnavailable)
	}
	return f.Store.Renew(ctx, key, token, ttl)
}

func TestLostReplyReconciledWithSameToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: memstore.New(nil).Leases()}
		f.dropAcquires.Store(2)
		l, err := lease.New(f, nil).TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n := f.acquires.Load(); n != 3 {
			t.Fatalf("%d acquires sent, want 3", n)
		}
		info, _ := f.Inspect(t.Context(), "k")
		if !info.Held || info.Fence != l.Fence() {
			t.Fatalf("stored %+v, lease fence %d", info, l.Fence())
		}
	})
}

func TestUnknownAcquireCleansUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: memstore.New(nil).Leases()}
		f.dropAcquires.Store(100)
		_, err := lease.New(f, nil).TryAcquire(t.Context(), "k", time.Minute)
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		synctest.Wait() // the background release
		info, _ := f.Inspect(t.Context(), "k")
		if info.Held || info.Fence == 0 {
			t.Fatalf("stored %+v: the applied acquire should have been released", info)
		}
	})
}

func TestDoCancelsWhenRenewalFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: memstore.New(nil).Leases()}
		lk := lease.New(f, &lease.Options{ReleaseTimeout: time.Second})
		start := time.Now()
		boom := errors.New("fn saw cancellation")
		err := lk.Do(t.Context(), "k", time.Second, func(ctx context.Context, l *lease.Lease) error {
			f.refuseRenew.Store(true)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), lease.ErrLost) {
				t.Errorf("cause = %v", context.Cause(ctx))
			}
			if elapsed := time.Since(start); elapsed != 988*time.Millisecond {
				t.Errorf("cancelled after %v, want at validity end 988ms", elapsed)
			}
			return boom
		})
		if !errors.Is(err, lease.ErrLost) || !errors.Is(err, boom) {
			t.Fatalf("Do = %v, want ErrLost and fn's error", err)
		}
	})
}

func TestTokenNeverPrinted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := lease.New(memstore.New(nil).Leases(), nil)
		l, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("got", "lease", l)
		slog.New(slog.NewTextHandler(&buf, nil)).Info("got", "lease", l)
		fmt.Fprintf(&buf, "%v %s %+v %#v %q", l, l, l, l, l)
		out := buf.String()
		if strings.Contains(out, l.Token()) {
			t.Fatalf("token printed: %s", out)
		}
		if !strings.Contains(out, `"fence"`) || !strings.Contains(out, "REDACTED") {
			t.Fatalf("unexpected output: %s", out)
		}
		if len(l.Token()) < 22 {
			t.Fatalf("token too short for 128 bits: %d chars", len(l.Token()))
		}
	})
}

func TestReleaseEndsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil).Leases()
		l, err := lease.New(s, nil).TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		if !errors.Is(l.Err(), lease.ErrNotHeld) || errors.Is(l.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrNotHeld (released)", l.Err())
		}
		if err := l.Release(t.Context()); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("second Release = %v, want ErrNotHeld", err)
		}
		// A cancelled context still releases.
		l2, _ := lease.New(s, nil).TryAcquire(t.Context(), "k", time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := l2.Release(ctx); err != nil {
			t.Fatalf("Release with cancelled ctx: %v", err)
		}
		if info, _ := s.Inspect(t.Context(), "k"); info.Held {
			t.Fatal("still held")
		}
	})
}

func TestNextFence(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	if got := lease.NextFence(5, now); got != 1_000_000 {
		t.Fatalf("NextFence(5) = %d, want the clock floor", got)
	}
	if got := lease.NextFence(2_000_000, now); got != 2_000_001 {
		t.Fatalf("NextFence(2e6) = %d", got)
	}
}
