package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

func newConcurrency(t testing.TB, s ratelimit.Store, permits int, ttl time.Duration) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Name: uniq("perm"), Permits: permits, TTL: ttl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testPermitsLimit(t *testing.T, tg Target) {
	ctx := ctxT(t)
	c := newConcurrency(t, tg.Store, 3, time.Minute)
	var ps []*ratelimit.Permit
	var last uint64
	for i := range 3 {
		p, err := c.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatalf("permit %d: %v", i+1, err)
		}
		if p.Fence() <= last {
			t.Fatalf("permit %d fence %d not above %d", i+1, p.Fence(), last)
		}
		last = p.Fence()
		if strings.Contains(p.String(), "id=") && !strings.Contains(p.String(), "redacted") {
			t.Fatalf("permit String shows its id: %s", p)
		}
		ps = append(ps, p)
	}
	_, err := c.TryAcquire(ctx, "job")
	var le *ratelimit.LimitedError
	if !errors.As(err, &le) || !errors.Is(err, ratelimit.ErrLimited) || le.InUse != 3 || le.Permits != 3 || le.RetryAfter <= 0 || le.RetryAfter > time.Minute {
		t.Fatalf("4th permit: %v (%+v), want *LimitedError 3 of 3 in use", err, le)
	}
	if p, err := c.TryAcquire(ctx, "other"); err != nil {
		t.Fatalf("another key: %v", err)
	} else if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ps[1].Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-ps[1].Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if err := ps[1].Release(ctx); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("second release: %v, want ErrPermitLost", err)
	}
	p, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if p.Fence() <= last {
		t.Fatalf("fence %d after release not above %d", p.Fence(), last)
	}
}

func testPermitsConcurrent(t *testing.T, tg Target) {
	ctx := ctxT(t)
	c := newConcurrency(t, tg.Store, 3, time.Minute)
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		mu     sync.Mutex
		got    []*ratelimit.Permit
		others int
	)
	for range 30 {
		wg.Go(func() {
			<-start
			p, err := c.TryAcquire(ctx, "hot")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				got = append(got, p)
			case errors.Is(err, ratelimit.ErrLimited):
				others++
			default:
				t.Errorf("TryAcquire: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(got) != 3 || others != 27 {
		t.Fatalf("%d permits granted, %d refused; want 3 and 27", len(got), others)
	}
	fences := map[uint64]bool{}
	for _, p := range got {
		if fences[p.Fence()] {
			t.Fatalf("fence %d granted twice", p.Fence())
		}
		fences[p.Fence()] = true
	}
}

// waitPermit retries TryAcquire until it succeeds (the store decides when
// the old permit expired).
func waitPermit(t testing.TB, tg Target, c *ratelimit.Concurrency, key string, step time.Duration) *ratelimit.Permit {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.TryAcquire(ctxT(t), key)
		if err == nil {
			return p
		}
		if !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no permit after 10s: %v", err)
		}
		wait(tg, step)
	}
}

func testPermitExpires(t *testing.T, tg Target) {
	// The case needs requests sent while a 150ms permit is still valid; a
	// round where a loaded machine sent one too late proves nothing and is
	// run again on another key (at most five times).
	for i := range 5 {
		if permitExpires(t, tg, fmt.Sprintf("job%d", i)) {
			return
		}
		t.Logf("a request meant for a permit's validity was sent after it; running the case again")
	}
	t.Fatal("five rounds in a row, a request was sent after the permit's validity")
}

// permitExpires runs one round on key; false when a request that the case
// needs within a permit's validity was sent after it.
func permitExpires(t *testing.T, tg Target, key string) bool {
	ctx := ctxT(t)
	ttl := 150 * time.Millisecond
	c := newConcurrency(t, tg.Store, 1, ttl)
	old, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// full asks for a second permit while p is valid: the key is full.
	full := func(p *ratelimit.Permit, what string) bool {
		sent := time.Now()
		_, err := c.TryAcquire(ctx, key)
		if !sent.Before(p.ValidUntil()) {
			return false
		}
		if !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("%s: %v", what, err)
		}
		return true
	}
	if !full(old, "while held") {
		return false
	}
	// The holder "dies": it neither renews nor releases.
	next := waitPermit(t, tg, c, key, 10*time.Millisecond)
	if next.Fence() <= old.Fence() {
		t.Fatalf("new fence %d not above the expired %d", next.Fence(), old.Fence())
	}
	if err := old.Renew(ctx); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("renewing an expired permit: %v, want ErrPermitLost", err)
	}
	if err := old.Release(ctx); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("releasing an expired permit: %v, want ErrPermitLost", err)
	}
	if !full(next, "the old holder's release freed the new holder's permit") {
		return false
	}
	valid, sent := next.ValidUntil(), time.Now()
	if err := next.Release(ctx); err != nil {
		if errors.Is(err, ratelimit.ErrPermitLost) && !sent.Before(valid) {
			return false
		}
		t.Fatal(err)
	}
	return true
}

func testPermitRenew(t *testing.T, tg Target) {
	// The case needs every renewal sent while the permit is valid; a round
	// where a loaded machine sent one after that proves nothing and is run
	// again on another key (at most five times).
	for i := range 5 {
		if permitRenew(t, tg, fmt.Sprintf("job%d", i)) {
			return
		}
		t.Logf("a renewal was sent after the permit's validity; running the case again")
	}
	t.Fatal("five rounds in a row, a renewal was sent after the permit's validity")
}

// permitRenew runs one round on key; false when a renewal was sent after
// the permit's validity had run out.
func permitRenew(t *testing.T, tg Target, key string) bool {
	ctx := ctxT(t)
	// Renewed every 100ms for a second: past its TTL, with room for a
	// slow machine between renewals.
	ttl := 600 * time.Millisecond
	c := newConcurrency(t, tg.Store, 1, ttl)
	p, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		wait(tg, ttl/6)
		valid, sent := p.ValidUntil(), time.Now()
		if err := p.Renew(ctx); err != nil {
			if errors.Is(err, ratelimit.ErrPermitLost) && !sent.Before(valid) {
				return false
			}
			t.Fatalf("renew: %v", err)
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("another holder got in while the permit was renewed: %v", err)
		}
	}
	valid, sent := p.ValidUntil(), time.Now()
	if err := p.Release(ctx); err != nil {
		if errors.Is(err, ratelimit.ErrPermitLost) && !sent.Before(valid) {
			return false
		}
		t.Fatal(err)
	}
	q, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	q.Release(ctx)
	return true
}

func testPermitSameID(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Store
	k := driver.StateKey{Name: uniq("same"), Kind: "p", Key: "k"}
	g1, err := s.AcquirePermit(ctx, k, "id-1", 2, time.Minute)
	if err != nil || !g1.Acquired || g1.Fence == 0 || g1.InUse != 1 {
		t.Fatalf("first acquire: %+v, %v", g1, err)
	}
	g2, err := s.AcquirePermit(ctx, k, "id-1", 2, time.Minute)
	if err != nil || !g2.Acquired || g2.Fence != g1.Fence || g2.InUse != 1 {
		t.Fatalf("acquire again with the same id: %+v, %v; want the same permit (fence %d)", g2, err, g1.Fence)
	}
	g3, err := s.AcquirePermit(ctx, k, "id-2", 2, time.Minute)
	if err != nil || !g3.Acquired || g3.Fence <= g1.Fence || g3.InUse != 2 {
		t.Fatalf("a second id: %+v, %v", g3, err)
	}
	g4, err := s.AcquirePermit(ctx, k, "id-3", 2, time.Minute)
	if err != nil || g4.Acquired || g4.InUse != 2 || g4.RetryAfter <= 0 {
		t.Fatalf("a third id over 2 permits: %+v, %v", g4, err)
	}
	if r, err := s.RenewPermit(ctx, k, "id-1", time.Minute); err != nil || r.Fence != g1.Fence || r.TTL != time.Minute {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	if err := s.ReleasePermit(ctx, k, "id-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleasePermit(ctx, k, "id-1"); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("release twice: %v", err)
	}
	if _, err := s.RenewPermit(ctx, k, "id-1", time.Minute); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("renew after release: %v", err)
	}
	if err := s.ReleasePermit(ctx, k, "never"); !errors.Is(err, ratelimit.ErrPermitLost) {
		t.Fatalf("release of an unknown id: %v", err)
	}
}

// refusals is a ratelimit.Store that closes refused once the store has
// refused a permit.
type refusals struct {
	ratelimit.Store
	once    sync.Once
	refused chan struct{}
}

func (s *refusals) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	g, err := s.Store.AcquirePermit(ctx, key, id, permits, ttl)
	if err == nil && !g.Acquired {
		s.once.Do(func() { close(s.refused) })
	}
	return g, err
}

// deadlineAt is a context whose deadline passes when end is closed.
type deadlineAt struct {
	context.Context
	end <-chan struct{}
}

func (c deadlineAt) Done() <-chan struct{} { return c.end }

func (c deadlineAt) Err() error {
	select {
	case <-c.end:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func testPermitWaits(t *testing.T, tg Target) {
	ctx := ctxT(t)
	rs := &refusals{Store: tg.Store, refused: make(chan struct{})}
	c := newConcurrency(t, rs, 1, time.Minute)
	held, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// Nobody releases: Acquire gives up when its context ends, and the
	// error wraps the last refusal it saw. The deadline passes once the
	// store has refused at least once, however long a loaded store takes
	// to answer.
	end := make(chan struct{})
	go func() {
		select {
		case <-rs.refused:
		case <-ctx.Done():
		}
		close(end)
	}()
	_, err = c.Acquire(deadlineAt{ctx, end}, "job")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("Acquire while held until the deadline: %v, want DeadlineExceeded and ErrLimited", err)
	}
	// The holder releases while another waits.
	got := make(chan *ratelimit.Permit, 1)
	errc := make(chan error, 1)
	go func() {
		p, err := c.Acquire(ctx, "job")
		errc <- err
		got <- p
	}()
	time.Sleep(50 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("waiting Acquire: %v", err)
	}
	p := <-got
	if p.Fence() <= held.Fence() {
		t.Fatalf("fence %d not above %d", p.Fence(), held.Fence())
	}
	p.Release(ctx)
}

func testPermitDo(t *testing.T, tg Target) {
	ctx := ctxT(t)
	// On a real clock the renewals (every TTL/3) are round trips that a
	// busy machine slows down: through tenure serve to PostgreSQL, 200 ms
	// was not always enough for one. The TTL leaves them seconds.
	ttl := 3 * time.Second
	if tg.Clock != nil {
		ttl = 600 * time.Millisecond
	}
	c := newConcurrency(t, tg.Store, 1, ttl)
	ran := false
	err := c.Do(ctx, "job", func(ctx context.Context) error {
		// Longer than the TTL: the permit is kept alive meanwhile.
		for range 8 {
			time.Sleep(ttl / 6)
			if tg.Clock != nil {
				tg.Clock.Advance(ttl / 6)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := c.TryAcquire(context.Background(), "job"); !errors.Is(err, ratelimit.ErrLimited) {
				return fmt.Errorf("another holder got in during Do: %v", err)
			}
		}
		ran = true
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	p, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("after Do the permit is released: %v", err)
	}
	p.Release(ctx)
}
