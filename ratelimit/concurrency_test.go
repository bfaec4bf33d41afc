package ratelimit_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
)

// TestAcquireWaitsForExpiry: a holder that died frees its permit after the
// TTL; a waiter polls with backoff but never sleeps past the soonest
// expiry, so it gets the permit right then (fake time in a bubble).
func TestAcquireWaitsForExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := ratelimit.NewConcurrency(newMem(t, nil).Limits(), ratelimit.ConcurrencyLimit{Permits: 1, TTL: 10 * time.Second}, nil)
		if _, err := c.TryAcquire(ctx, "job"); err != nil { // and never released
			t.Fatal(err)
		}
		start := time.Now()
		p, err := c.Acquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 10*time.Second || waited > 10*time.Second+300*time.Millisecond {
			t.Fatalf("waited %v for a permit that expired after 10s", waited)
		}
		p.Release(ctx)
	})
}

// TestDoCancelsWhenPermitLost: when renewals fail (the store is cut off),
// fn's context ends before the permit's validity runs out, and Do reports
// the loss.
func TestDoCancelsWhenPermitLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := newMem(t, nil)
		s, faults := ratelimittest.Wrap(ms.Limits())
		ttl := 9 * time.Second
		c, _ := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 1, TTL: ttl}, nil)
		start := time.Now()
		var ended time.Duration
		err := c.Do(context.Background(), "job", func(ctx context.Context) error {
			faults.Cut()
			<-ctx.Done()
			ended = time.Since(start)
			return nil
		})
		faults.Heal()
		if !errors.Is(err, ratelimit.ErrPermitLost) {
			t.Fatalf("Do: %v, want ErrPermitLost", err)
		}
		if ended <= 0 || ended >= ttl {
			t.Fatalf("fn's context ended after %v, want before the TTL %v", ended, ttl)
		}
	})
}

// TestDoRenews: Do keeps the permit for work longer than the TTL.
func TestDoRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := ratelimit.NewConcurrency(newMem(t, nil).Limits(), ratelimit.ConcurrencyLimit{Permits: 1, TTL: 3 * time.Second}, nil)
		err := c.Do(ctx, "job", func(ctx context.Context) error {
			time.Sleep(20 * time.Second)
			if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, ratelimit.ErrLimited) {
				t.Errorf("another holder got in: %v", err)
			}
			return ctx.Err()
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if _, err := c.TryAcquire(ctx, "job"); err != nil {
			t.Fatalf("after Do: %v", err)
		}
	})
}

// TestDoReleasesOnPanic: when fn panics (or calls runtime.Goexit) while Do
// keeps its permit alive, Do stops renewing and releases the permit, and
// the panic reaches the caller unchanged.
func TestDoReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := ratelimit.NewConcurrency(newMem(t, nil).Limits(), ratelimit.ConcurrencyLimit{Permits: 1, TTL: 3 * time.Second}, nil)
		var got any
		func() {
			defer func() { got = recover() }()
			c.Do(ctx, "job", func(ctx context.Context) error {
				time.Sleep(5 * time.Second) // past a renewal
				panic("boom")
			})
		}()
		if got != "boom" {
			t.Fatalf("recovered %v, want the panic of fn", got)
		}
		p, err := c.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatalf("the permit of the panicking fn is still held: %v", err)
		}
		p.Release(ctx)

		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Do(ctx, "job", func(ctx context.Context) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		if p, err = c.TryAcquire(ctx, "job"); err != nil {
			t.Fatalf("the permit of an fn that called Goexit is still held: %v", err)
		}
		p.Release(ctx)
		// Nothing renews anything any more: the bubble ends with no
		// goroutine left behind.
		time.Sleep(time.Minute)
		synctest.Wait()
	})
}

// endsDuringAttempt ends ctx while its second permit attempt is at the
// store, which then answers with ctx's error: a store that checks its
// context.
type endsDuringAttempt struct {
	ratelimit.Store
	cancel   context.CancelFunc
	attempts int
}

func (s *endsDuringAttempt) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	if s.attempts++; s.attempts == 3 { // the holder's, the refused one, then this
		s.cancel()
		return driver.PermitGrant{}, ctx.Err()
	}
	return s.Store.AcquirePermit(ctx, key, id, permits, ttl)
}

// TestAcquireEndedMidAttemptKeepsRefusal: when ctx ends while an attempt
// is at the store and the store answers with ctx's error, Acquire's error
// still wraps the refusal seen before (a loaded machine made that order
// happen).
func TestAcquireEndedMidAttemptKeepsRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &endsDuringAttempt{Store: newMem(t, nil).Limits(), cancel: cancel}
		c, _ := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 1, TTL: time.Minute}, nil)
		if _, err := c.TryAcquire(context.Background(), "job"); err != nil {
			t.Fatal(err)
		}
		_, err := c.Acquire(ctx, "job")
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("Acquire: %v, want context.Canceled and ErrLimited", err)
		}
		var le *ratelimit.LimitedError
		if !errors.As(err, &le) || le.InUse != 1 {
			t.Fatalf("Acquire: %v, want the refusal with 1 permit in use", err)
		}
		if s.attempts != 3 {
			t.Fatalf("%d attempts at the store, want 3", s.attempts)
		}
	})
}
