package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// The tests run inside synctest bubbles: memstore's default clock and the
// Locker's timers both use the bubble's fake time, so expiry is exact and no
// test sleeps for real.

func TestValidityEndsBeforeStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMem(t, nil).Leases()
		lk := leasetest.NewLocker(t, s, nil)
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
		lk := leasetest.NewLocker(t, newMem(t, nil).Leases(), nil)
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
		lk := leasetest.NewLocker(t, newMem(t, nil).Leases(), nil)
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
		lk := leasetest.NewLocker(t, newMem(t, nil).Leases(), nil)
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

// TestAcquireWithEndedContextSendsNothing: an Acquire whose context has
// ended sends no attempt, so it leaves no place to give up and nothing to
// release in the background after it returned.
func TestAcquireWithEndedContextSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: newMem(t, nil).Leases()}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		l, err := leasetest.NewLocker(t, f, nil).Acquire(ctx, "k", time.Minute)
		if !errors.Is(err, context.Canceled) || l != nil {
			t.Fatalf("Acquire with an ended context: %v, %v; want context.Canceled", l, err)
		}
		synctest.Wait() // any background give-up
		if n := f.acquires.Load(); n != 0 {
			t.Fatalf("%d acquires sent with an ended context, want none", n)
		}
		if info, err := f.Inspect(t.Context(), "k"); err != nil || info.Held || info.Fence != 0 {
			t.Fatalf("stored %+v, %v; want nothing", info, err)
		}
	})
}

func TestTryAcquireHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk := leasetest.NewLocker(t, newMem(t, nil).Leases(), nil)
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
		s := newMem(t, nil).Leases()
		lk := leasetest.NewLocker(t, s, nil)
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
		s := newMem(t, nil).Leases()
		boom := errors.New("boom")
		err := leasetest.NewLocker(t, s, nil).Do(t.Context(), "k", time.Second, func(context.Context, *lease.Lease) error { return boom })
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
	downRelease  atomic.Bool // releases fail as unreachable
	acquires     atomic.Int32
	releases     atomic.Int32
}

func (f *faulty) Release(ctx context.Context, key, token string) error {
	f.releases.Add(1)
	if f.downRelease.Load() {
		return fmt.Errorf("%w: unreachable", lease.ErrUnavailable)
	}
	return f.Store.Release(ctx, key, token)
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
		f := &faulty{Store: newMem(t, nil).Leases()}
		f.dropAcquires.Store(2)
		l, err := leasetest.NewLocker(t, f, nil).TryAcquire(t.Context(), "k", time.Second)
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
		f := &faulty{Store: newMem(t, nil).Leases()}
		f.dropAcquires.Store(100)
		_, err := leasetest.NewLocker(t, f, nil).TryAcquire(t.Context(), "k", time.Minute)
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

// A release while the store cannot be reached retries for
// Options.ReleaseTimeout and returns the store's error, even with a
// context that never ends; the lease ends all the same.
func TestReleaseBoundedWhileStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: newMem(t, nil).Leases()}
		lk := leasetest.NewLocker(t, f, &lease.Options{ReleaseTimeout: 2 * time.Second})
		l, err := lk.TryAcquire(t.Context(), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f.downRelease.Store(true)
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- l.Release(context.Background()) }()
		select {
		case err = <-done:
		case <-time.After(time.Hour):
			t.Fatal("Release still retrying after an hour")
		}
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Release = %v, want ErrUnavailable", err)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Fatalf("Release returned after %v, want within ReleaseTimeout (2s)", elapsed)
		}
		if n := f.releases.Load(); n < 2 {
			t.Fatalf("%d release requests, want the unknown outcome sent again", n)
		}
		<-l.Done() // the lease counts as ended
		if info, _ := f.Inspect(t.Context(), "k"); !info.Held {
			t.Fatalf("stored %+v: no release reached the store, the lease should still be there", info)
		}
	})
}

func TestDoCancelsWhenRenewalFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{Store: newMem(t, nil).Leases()}
		lk := leasetest.NewLocker(t, f, &lease.Options{ReleaseTimeout: time.Second})
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
		lk := leasetest.NewLocker(t, newMem(t, nil).Leases(), nil)
		l, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A Lease printed by value (through reflection, as fmt does for a
		// copy or a field it cannot call methods on), by pointer, and nested
		// in exported and unexported fields of a caller's structs.
		byValue := reflect.ValueOf(l).Elem().Interface()
		type holder struct {
			name  string
			lease any
		}
		type Exported struct {
			Lease *lease.Lease
			in    holder
		}
		values := map[string]any{
			"pointer":           l,
			"value":             byValue,
			"unexported field":  holder{"h", byValue},
			"pointer field":     holder{"h", l},
			"exported field":    Exported{Lease: l, in: holder{"h", byValue}},
			"pointer to struct": &Exported{Lease: l, in: holder{"h", byValue}},
			"slice of values":   []any{byValue},
			"map of unexported": map[string]holder{"k": {"h", byValue}},
		}
		var buf bytes.Buffer
		for name, v := range values {
			buf.Reset()
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("got", "lease", v)
			slog.New(slog.NewTextHandler(&buf, nil)).Info("got", "lease", v)
			for _, verb := range []string{"%v", "%s", "%+v", "%#v", "%q", "%x", "%d"} {
				fmt.Fprintf(&buf, verb+"\n", v)
			}
			if b, err := json.Marshal(v); err == nil {
				buf.Write(b)
			}
			if out := buf.String(); strings.Contains(out, l.Token().Reveal()) || strings.Contains(out, fmt.Sprintf("%x", l.Token().Reveal())) {
				t.Errorf("%s: token printed: %s", name, out)
			}
		}
		buf.Reset()
		fmt.Fprintf(&buf, "%v", l)
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("got", "lease", l)
		if out := buf.String(); !strings.Contains(out, `"fence"`) || !strings.Contains(out, "REDACTED") {
			t.Fatalf("unexpected output: %s", out)
		}
		if len(l.Token().Reveal()) < 22 {
			t.Fatalf("token too short for 128 bits: %d chars", len(l.Token().Reveal()))
		}
	})
}

// A panic in Do's function, recovered by the caller as net/http does for a
// handler, must not leave the lease renewed by the keep-alive: Do releases
// it before the panic goes on.
func TestDoPanicReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMem(t, nil).Leases()
		lk := leasetest.NewLocker(t, s, nil)
		var got any
		func() {
			defer func() { got = recover() }()
			lk.Do(t.Context(), "k", time.Second, func(context.Context, *lease.Lease) error {
				panic("boom")
			})
		}()
		if got != "boom" {
			t.Fatalf("recovered %v, want the function's panic value", got)
		}
		info, err := s.Inspect(t.Context(), "k")
		if err != nil || info.Held {
			t.Fatalf("after the panic the key is %+v (%v), want released", info, err)
		}
		// Long after: nothing renews it behind the caller's back.
		time.Sleep(5 * time.Second)
		if _, err := lk.TryAcquire(t.Context(), "k", time.Second); err != nil {
			t.Fatalf("another caller cannot take the key after the panic: %v", err)
		}
		// runtime.Goexit (t.FailNow in fn) ends the tenure the same way.
		done := make(chan struct{})
		go func() {
			defer close(done)
			lk.Do(context.Background(), "g", time.Second, func(context.Context, *lease.Lease) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		if info, err := s.Inspect(t.Context(), "g"); err != nil || info.Held {
			t.Fatalf("after Goexit the key is %+v (%v), want released", info, err)
		}
	})
}

func TestBadInputRefused(t *testing.T) {
	s := newMem(t, nil).Leases()
	if _, err := lease.New(nil, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("New(nil) = %v, want ErrInvalid", err)
	}
	for name, o := range map[string]lease.Options{
		"NaN drift":          {DriftFactor: math.NaN()},
		"infinite drift":     {DriftFactor: math.Inf(1)},
		"negative drift":     {DriftFactor: -0.1},
		"drift of one half":  {DriftFactor: 0.5},
		"negative margin":    {Margin: -time.Millisecond},
		"negative retry min": {RetryMin: -time.Millisecond},
		"retry max < min":    {RetryMin: time.Second, RetryMax: time.Millisecond},
		"negative attempts":  {Attempts: -1},
		"negative release":   {ReleaseTimeout: -time.Second},
	} {
		if lk, err := lease.New(s, &o); !errors.Is(err, lease.ErrInvalid) || lk != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalid", name, lk, err)
		}
	}
	lk := leasetest.NewLocker(t, s, &lease.Options{DriftFactor: 0.2, Margin: time.Millisecond})
	if err := lk.Do(t.Context(), "k", time.Second, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Do(nil fn) = %v, want ErrInvalid", err)
	}
	if info, err := s.Inspect(t.Context(), "k"); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Do(nil fn) wrote: %+v %v", info, err)
	}
}

func TestReleaseEndsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMem(t, nil).Leases()
		l, err := leasetest.NewLocker(t, s, nil).TryAcquire(t.Context(), "k", time.Second)
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
		l2, _ := leasetest.NewLocker(t, s, nil).TryAcquire(t.Context(), "k", time.Second)
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
	if got := leasedriver.NextFence(5, now); got != 1_000_000 {
		t.Fatalf("NextFence(5) = %d, want the clock floor", got)
	}
	if got := leasedriver.NextFence(2_000_000, now); got != 2_000_001 {
		t.Fatalf("NextFence(2e6) = %d", got)
	}
}

func TestTryDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMem(t, nil).Leases()
		lk := leasetest.NewLocker(t, s, nil)
		holder, err := lk.TryAcquire(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		start := time.Now()
		err = lk.TryDo(t.Context(), "k", time.Second, func(context.Context, *lease.Lease) error { ran = true; return nil })
		var held *lease.HeldError
		if !errors.As(err, &held) || ran || time.Since(start) != 0 {
			t.Fatalf("TryDo on a held key = %v after %v (ran %v), want a HeldError at once", err, time.Since(start), ran)
		}
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Granted: kept alive past its TTL while fn runs, released after.
		err = lk.TryDo(t.Context(), "k", time.Second, func(ctx context.Context, l *lease.Lease) error {
			time.Sleep(3 * time.Second)
			if info, err := s.Inspect(ctx, "k"); err != nil || !info.Held || info.Fence != l.Fence() {
				t.Errorf("during fn the store shows %+v %v, want held with fence %d", info, err, l.Fence())
			}
			return ctx.Err()
		})
		if err != nil {
			t.Fatalf("TryDo = %v", err)
		}
		if info, err := s.Inspect(t.Context(), "k"); err != nil || info.Held {
			t.Fatalf("after TryDo the key is %+v %v, want released", info, err)
		}
		if err := lk.TryDo(t.Context(), "k", time.Second, nil); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("TryDo(nil fn) = %v, want ErrInvalid", err)
		}
	})
}
