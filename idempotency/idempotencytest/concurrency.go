package idempotencytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// concurrent runs n duplicates of req at once, each through a client and
// Keeper of its own.
func concurrent(t *testing.T, tg Target, n int, o *idempotency.Options, req idempotency.Request, fn idempotency.Func) ([]idempotency.Result, []error) {
	keepers := make([]*idempotency.Keeper, n)
	for i := range keepers {
		keepers[i] = newKeeper(t, tg.NewClient(t), o)
	}
	results := make([]idempotency.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = keepers[i].Do(ctxT(t), req, fn)
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

func slowCounter(c *counter, d time.Duration) idempotency.Func {
	return func(ctx context.Context, cl *idempotency.Claim) ([]byte, error) {
		time.Sleep(d)
		return c.fn(ctx, cl)
	}
}

func testConcurrentNoWait(t *testing.T, tg Target) {
	req := request(t, "a")
	c := &counter{value: "once"}
	results, errs := concurrent(t, tg, 50, nil, req, slowCounter(c, 20*time.Millisecond))
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times among 50 duplicates, want 1", c.runs())
	}
	ran := 0
	for i, err := range errs {
		var ip *idempotency.InProgressError
		switch {
		case err == nil && !results[i].Replayed:
			ran++
			fallthrough
		case err == nil:
			if string(results[i].Value) != "once" {
				t.Fatalf("duplicate %d got %q", i, results[i].Value)
			}
		case errors.As(err, &ip):
			if ip.RetryAfter <= 0 || ip.RetryAfter > 30*time.Second+time.Second {
				t.Fatalf("RetryAfter %v, want within the 30s claim", ip.RetryAfter)
			}
		default:
			t.Fatalf("duplicate %d: %v, want a result or ErrInProgress", i, err)
		}
	}
	if ran != 1 {
		t.Fatalf("%d duplicates report running fn, want 1", ran)
	}
	wantCompleted(t, tg.Direct, req, "once")
}

func testConcurrentWait(t *testing.T, tg Target) {
	req := request(t, "a")
	c := &counter{value: "once"}
	results, errs := concurrent(t, tg, 50, &idempotency.Options{Wait: true}, req, slowCounter(c, 50*time.Millisecond))
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times among 50 duplicates, want 1", c.runs())
	}
	fresh := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("duplicate %d: %v", i, err)
		}
		if string(results[i].Value) != "once" {
			t.Fatalf("duplicate %d got %q", i, results[i].Value)
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d results not replayed, want 1", fresh)
	}
	wantCompleted(t, tg.Direct, req, "once")
}

// blocked starts Do on k with an fn that waits for release; it returns
// when fn is running.
func blocked(t *testing.T, k *idempotency.Keeper, req idempotency.Request, value string) (release func(), result func() (idempotency.Result, error)) {
	started, finish := make(chan struct{}), make(chan struct{})
	type out struct {
		r   idempotency.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := k.Do(ctxT(t), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
			close(started)
			<-finish
			return []byte(value), nil
		})
		done <- out{r, err}
	}()
	select {
	case <-started:
	case o := <-done:
		t.Fatalf("Do returned before fn ran: %+v %v", o.r, o.err)
	}
	var once sync.Once
	return func() { once.Do(func() { close(finish) }) }, func() (idempotency.Result, error) {
		o := <-done
		return o.r, o.err
	}
}

func testInProgress(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	release, result := blocked(t, k, req, "first")
	defer release()
	rec := inspect(t, tg.Direct, req.ID())
	if !rec.Exists || rec.Completed || rec.ClaimTTL <= 0 || rec.Fence == 0 {
		t.Fatalf("record while running: %+v, want a live claim", rec)
	}
	c := &counter{value: "second"}
	_, err := k.Do(ctxT(t), req, c.fn)
	var ip *idempotency.InProgressError
	if !errors.As(err, &ip) || !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("duplicate: %v, want *InProgressError", err)
	}
	if ip.RetryAfter <= 0 || ip.RetryAfter > 30*time.Second || ip.Key != req.Key || ip.Scope != req.Scope {
		t.Fatalf("InProgressError %+v", ip)
	}
	// A waiting duplicate returns the first one's result.
	waiter := newKeeper(t, tg.NewClient(t), &idempotency.Options{Wait: true})
	got := make(chan idempotency.Result, 1)
	go func() {
		r, err := waiter.Do(ctxT(t), req, c.fn)
		if err != nil {
			t.Errorf("waiting duplicate: %v", err)
		}
		got <- r
	}()
	release()
	if r, err := result(); err != nil || r.Replayed || string(r.Value) != "first" {
		t.Fatalf("first: %+v %v", r, err)
	}
	if r := <-got; !r.Replayed || string(r.Value) != "first" {
		t.Fatalf("waiting duplicate got %+v, want a replay of first", r)
	}
	if c.runs() != 0 {
		t.Fatalf("duplicates ran fn %d times", c.runs())
	}
	// A waiter gives up when its context ends. The deadline leaves a busy
	// machine time for the waiter's first attempt to see the live claim
	// (the holder holds it until release2, however long that is).
	req2 := request(t, "b")
	release2, result2 := blocked(t, k, req2, "x")
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	if _, err := waiter.Do(ctx, req2, c.fn); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("waiter past its deadline: %v, want DeadlineExceeded and ErrInProgress", err)
	}
	release2()
	if _, err := result2(); err != nil {
		t.Fatal(err)
	}
}
