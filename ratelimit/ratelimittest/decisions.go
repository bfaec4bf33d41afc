package ratelimittest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"pgregory.net/rapid"
)

// testExactCapacity: with a long period, exactly the capacity passes, one
// unit at a time or several; a request is denied only when it does not fit,
// and a smaller one that fits still passes.
func testExactCapacity(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	l := newLimiter(t, tg.Store, alg, limitFor(alg, 10, time.Hour))
	for i := range 10 {
		d, err := l.Allow(ctx, "one")
		if err != nil || !d.Allowed || d.Remaining != 9-i || d.RetryAfter != 0 || d.ResetAfter <= 0 {
			t.Fatalf("Allow %d: %+v, %v", i+1, d, err)
		}
	}
	d, err := l.Allow(ctx, "one")
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Hour {
		t.Fatalf("Allow 11: %+v, %v; want denied with 0 < RetryAfter <= 2h (the sliding window counter may wait into the next window)", d, err)
	}
	// Weighted: 6 pass, 5 does not fit in the 4 left, 4 does.
	if d, err := l.AllowN(ctx, "w", 6); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("AllowN 6: %+v, %v", d, err)
	}
	if d, err := l.AllowN(ctx, "w", 5); err != nil || d.Allowed || d.Remaining != 4 {
		t.Fatalf("AllowN 5 with 4 left: %+v, %v; want denied, 4 remaining", d, err)
	}
	if d, err := l.AllowN(ctx, "w", 4); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN 4 with 4 left: %+v, %v; want allowed (there is room)", d, err)
	}
	if d, err := l.AllowN(ctx, "w", 1); err != nil || d.Allowed {
		t.Fatalf("AllowN 1 with none left: %+v, %v", d, err)
	}
	if d, err := l.AllowN(ctx, "other", 10); err != nil || !d.Allowed {
		t.Fatalf("another key is independent: %+v, %v", d, err)
	}
	if ks := keys(t, tg); len(ks) != 3 {
		t.Fatalf("%d keys stored for 3 keys used: %v", len(ks), ks)
	}
}

func testPeek(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	l := newLimiter(t, tg.Store, alg, limitFor(alg, 4, time.Hour))
	for n := 0; n <= 4; n++ {
		for range 3 {
			d, err := l.Peek(ctx, "k", n)
			if err != nil || !d.Allowed || d.Remaining != 4 || d.ResetAfter != 0 {
				t.Fatalf("Peek(%d) on a fresh key: %+v, %v", n, d, err)
			}
		}
	}
	if ks := keys(t, tg); len(ks) != 0 {
		t.Fatalf("peeks wrote %v", ks)
	}
	if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("AllowN 3 after peeks: %+v, %v", d, err)
	}
	for range 3 {
		if d, err := l.Peek(ctx, "k", 2); err != nil || d.Allowed || d.Remaining != 1 || d.RetryAfter <= 0 {
			t.Fatalf("Peek(2) with 1 left: %+v, %v", d, err)
		}
		if d, err := l.Peek(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("Peek(1) with 1 left: %+v, %v", d, err)
		}
	}
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Allow after peeks: %+v, %v", d, err)
	}
}

func testReset(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	l := newLimiter(t, tg.Store, alg, limitFor(alg, 3, time.Hour))
	if _, err := l.AllowN(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "other", 1); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "k"); d.Allowed {
		t.Fatal("allowed over the limit")
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if ks := keys(t, tg); len(ks) != 1 {
		t.Fatalf("after Reset of one of two keys, the store holds %v", ks)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset of a key without state: %v", err)
	}
	d, err := l.AllowN(ctx, "k", 3)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN 3 after Reset: %+v, %v", d, err)
	}
	if d, err := l.Peek(ctx, "other", 0); err != nil || d.Remaining != 2 {
		t.Fatalf("Reset touched another key: %+v, %v", d, err)
	}
}

// drawLimit draws a small limit whose period suits the target's clock.
func drawLimit(rt *rapid.T, alg ratelimit.Algorithm, real bool) ratelimit.Limit {
	l := ratelimit.Limit{Name: uniq("m"), Rate: rapid.IntRange(1, 8).Draw(rt, "rate")}
	if real {
		l.Period = time.Duration(rapid.IntRange(2_000, 60_000).Draw(rt, "period_us")) * time.Microsecond
	} else {
		l.Period = time.Duration(rapid.Int64Range(1_000, 5_000_000).Draw(rt, "period_us")) * time.Microsecond
	}
	if alg == ratelimit.GCRA && rapid.Bool().Draw(rt, "has_burst") {
		l.Burst = rapid.IntRange(1, 12).Draw(rt, "burst")
	}
	return l
}

// testModelCheck drives random sequences of calls (allow, peek, reset, time
// passing) on the store and checks every decision against memstore
// replayed at the store's decision times. On a driven clock the store must
// also decide at exactly that clock's time.
func testModelCheck(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	modelCheck(t, tg, false, alg)
}

// testModelCheckGroup is testModelCheck on groups of two limits.
func testModelCheckGroup(t *testing.T, tg Target) {
	modelCheck(t, tg, true, ratelimit.GCRA)
}

func modelCheck(t *testing.T, tg Target, group bool, alg ratelimit.Algorithm) {
	real := tg.Clock == nil
	{
		rapid.Check(t, func(rt *rapid.T) {
			ctx := ctxT(t)
			sp := spec{algs: []ratelimit.Algorithm{alg}, lims: []ratelimit.Limit{drawLimit(rt, alg, real)}}
			if group {
				sp.group = uniq("g")
				second := rapid.SampledFrom(Algorithms).Draw(rt, "second")
				sp.algs = append(sp.algs, second)
				sp.lims = append(sp.lims, drawLimit(rt, second, real))
			}
			sub, err := sp.build(tg.Store)
			if err != nil {
				rt.Fatal(err)
			}
			m, err := newModel(sp)
			if err != nil {
				rt.Fatal(err)
			}
			capacity := sp.lims[0].Capacity()
			if group {
				capacity = min(capacity, sp.lims[1].Capacity())
			}
			period := sp.lims[0].Period
			maxSteps := 40
			if real {
				maxSteps = 25 // each step is a round trip to a server
			}
			steps := rapid.IntRange(1, maxSteps).Draw(rt, "steps")
			for range steps {
				keys := []string{rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "key")}
				if group {
					keys = append(keys, rapid.SampledFrom([]string{"a", "all"}).Draw(rt, "key2"))
				}
				var o obs
				switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
				case op < 5:
					o, err = sub.run(ctx, opAllow, keys, rapid.IntRange(1, capacity).Draw(rt, "n"))
				case op < 7:
					o, err = sub.run(ctx, opPeek, keys, rapid.IntRange(0, capacity).Draw(rt, "n"))
				case op == 7:
					o, err = sub.run(ctx, opReset, keys, 0)
				default:
					var d time.Duration
					if real {
						d = time.Duration(rapid.Int64Range(0, int64(min(period, 8*time.Millisecond)/time.Microsecond)).Draw(rt, "sleep_us")) * time.Microsecond
					} else {
						d = time.Duration(rapid.Int64Range(0, int64(2*period/time.Microsecond)).Draw(rt, "advance_us")) * time.Microsecond
					}
					wait(tg, d)
					continue
				}
				if err != nil {
					rt.Fatalf("%v: %v", o, err)
				}
				if tg.Clock != nil && o.kind != opReset && !o.at().Equal(time.UnixMicro(tg.Clock.Now().UnixMicro())) {
					rt.Fatalf("%v decided at %v, but the store's clock says %v", o, o.at(), tg.Clock.Now())
				}
				if diff := m.apply(o); diff != "" {
					rt.Fatalf("%v differs from the model: %s", o, diff)
				}
			}
		})
	}
}

// testConcurrent: many callers at once on one key with a long period;
// exactly the capacity passes, each unit once.
func testConcurrent(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	const capacity, callers = 20, 60
	l := newLimiter(t, tg.Store, alg, limitFor(alg, capacity, time.Hour))
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		got   []ratelimit.Decision
		errs  []error
	)
	for range callers {
		wg.Go(func() {
			<-start
			d, err := l.Allow(ctx, "hot")
			mu.Lock()
			defer mu.Unlock()
			got = append(got, d)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(errs), errs[0])
	}
	seen := map[int]bool{}
	allowed := 0
	for _, d := range got {
		if !d.Allowed {
			if d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Errorf("denied with %+v", d)
			}
			continue
		}
		allowed++
		if seen[d.Remaining] {
			t.Errorf("two callers were left %d units: a unit was handed out twice", d.Remaining)
		}
		seen[d.Remaining] = true
	}
	if allowed != capacity {
		t.Fatalf("%d of %d concurrent callers passed a limit of %d", allowed, callers, capacity)
	}
	if d, err := l.Peek(ctx, "hot", 0); err != nil || d.Remaining != 0 {
		t.Fatalf("Peek after the rush: %+v, %v", d, err)
	}
}

// testConcurrentReplay: concurrent callers on short periods, while time
// passes; every decision agrees with the model replayed in the order of the
// store's decision times. This checks, under concurrency, that admissions
// in any window never exceed what the algorithm allows and never fall
// short of it.
func testConcurrentReplay(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	lim := limitFor(alg, 4, 25*time.Millisecond)
	if alg == ratelimit.GCRA {
		lim.Burst = 6
	}
	sp := spec{algs: []ratelimit.Algorithm{alg}, lims: []ratelimit.Limit{lim}}
	sub, err := sp.build(tg.Store)
	if err != nil {
		t.Fatal(err)
	}
	const callers, calls = 6, 40
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []obs
	)
	if tg.Clock != nil {
		// A driven clock moves with every reading, so that the
		// store's decisions have distinct times and time passes
		// over two periods during the test.
		tg.Clock.Tick(211 * time.Microsecond)
		defer tg.Clock.Tick(0)
	}
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				n := 1 + (c+i)%3
				kind := opAllow
				if (c*7+i)%5 == 0 {
					kind = opPeek
				}
				o, err := sub.run(ctx, kind, []string{"k"}, n)
				if err != nil {
					t.Errorf("%v: %v", o, err)
					return
				}
				mu.Lock()
				all = append(all, o)
				mu.Unlock()
				time.Sleep(time.Duration((c*13+i*7)%9) * 100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	replay(t, sp, all)
}

// testRetryAfter: a denied request is allowed exactly RetryAfter later (on
// the store's clock), not earlier.
func testRetryAfter(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	ctx := ctxT(t)
	var (
		l      *ratelimit.Limiter
		d      ratelimit.Decision
		period time.Duration
		err    error
	)
	// On a real clock the three calls must land within one period, as
	// the store's own decision times show; on a busy machine they may
	// not, and the case is set up again with a period twice as long.
	for period = 200 * time.Millisecond; ; period *= 2 {
		l = newLimiter(t, tg.Store, alg, limitFor(alg, 3, period))
		first, err := l.AllowN(ctx, "k", 2)
		if err != nil {
			t.Fatal(err)
		}
		wait(tg, period/4)
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		d, err = l.AllowN(ctx, "k", 2)
		if tg.Clock != nil || err != nil || d.At.Sub(first.At) < period/2 || period >= 10*time.Second {
			break
		}
	}
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*period {
		t.Fatalf("AllowN 2 over the limit: %+v, %v", d, err)
	}
	due := d.At.Add(d.RetryAfter)
	if tg.Clock != nil {
		tg.Clock.Advance(d.RetryAfter - time.Microsecond)
		if p, err := l.Peek(ctx, "k", 2); err != nil || p.Allowed || p.RetryAfter != time.Microsecond {
			t.Fatalf("1µs before RetryAfter: %+v, %v; want denied for 1µs more", p, err)
		}
		tg.Clock.Advance(time.Microsecond)
		if p, err := l.AllowN(ctx, "k", 2); err != nil || !p.Allowed {
			t.Fatalf("at RetryAfter: %+v, %v; want allowed", p, err)
		}
		return
	}
	// On a real clock, poll the store's own judgement.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := l.Peek(ctx, "k", 2)
		if err != nil {
			t.Fatal(err)
		}
		if p.Allowed {
			if p.At.Before(due) {
				t.Fatalf("allowed at %v, before the RetryAfter %v promised (%v)", p.At, d.RetryAfter, due)
			}
			break
		}
		if !p.At.Add(p.RetryAfter).Equal(due) {
			t.Fatalf("RetryAfter moved: at %v it says %v (due %v), first it said %v", p.At, p.RetryAfter, p.At.Add(p.RetryAfter), due)
		}
		if time.Now().After(deadline) {
			t.Fatal("never allowed again")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testSubSecond: periods of 1ms and 100ms work on every store.
func testSubSecond(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	{
		for _, period := range []time.Duration{time.Millisecond, 100 * time.Millisecond} {
			t.Run(period.String(), func(t *testing.T) {
				ctx := ctxT(t)
				l := newLimiter(t, tg.Store, alg, limitFor(alg, 3, period))
				first, err := l.AllowN(ctx, "k", 3)
				if err != nil || !first.Allowed {
					t.Fatalf("AllowN 3: %+v, %v", first, err)
				}
				d, err := l.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 2*period) {
					t.Fatalf("denied with RetryAfter %v for a period of %v", d.RetryAfter, period)
				}
				if d.Allowed && d.At.Sub(first.At) < period/3 {
					t.Fatalf("a 4th unit passed %v after 3, period %v", d.At.Sub(first.At), period)
				}
				// Within a few periods (store clock) it is allowed again, and
				// the state expires.
				wait(tg, 2*period)
				deadline := time.Now().Add(10 * time.Second)
				for {
					d, err := l.Peek(ctx, "k", 3)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed && d.Remaining == 3 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("still limited long after %v: %+v", period, d)
					}
					wait(tg, period)
				}
				for _, k := range keys(t, tg) {
					if k.TTL > 2*period {
						t.Fatalf("key %s keeps a TTL of %v for a period of %v", k.Key, k.TTL, period)
					}
				}
			})
		}
	}
}

// testSkewedCallers: a caller whose clock is 26 years behind (inside a
// testing/synctest bubble, time.Now says 2000) gets the answers the model
// gives at the store's decision times, and those times are the store's.
func testSkewedCallers(t *testing.T, tg Target, alg ratelimit.Algorithm) {
	lim := limitFor(alg, 3, 50*time.Millisecond)
	sp := spec{algs: []ratelimit.Algorithm{alg}, lims: []ratelimit.Limit{lim}}
	sub, err := sp.build(tg.Store)
	if err != nil {
		t.Fatal(err)
	}
	var calls []obs
	record := func(skewed bool) {
		o, err := sub.run(context.Background(), opAllow, []string{"k"}, 1)
		if err != nil {
			t.Errorf("skewed=%v: %v", skewed, err)
		}
		calls = append(calls, o)
	}
	for i := range 12 {
		if i%2 == 0 {
			record(false)
		} else {
			synctest.Test(t, func(t *testing.T) {
				if time.Now().Year() != 2000 {
					t.Fatalf("the bubble's clock says %v", time.Now())
				}
				record(true)
			})
		}
		wait(tg, 7*time.Millisecond)
	}
	if t.Failed() {
		return
	}
	for _, o := range calls {
		want := time.Now()
		if tg.Clock != nil {
			want = tg.Clock.Now()
		}
		if d := want.Sub(o.at()); d < 0 || d > time.Minute {
			t.Fatalf("%v: decided at %v, not at the store's time %v", o, o.at(), want)
		}
	}
	replay(t, sp, calls)
}

// testGroup: a per-user and a global limit checked together; a request
// denied by one consumes nothing from the other.
func testGroup(t *testing.T, tg Target) {
	ctx := ctxT(t)
	user := newLimiter(t, tg.Store, ratelimit.GCRA, ratelimit.Limit{Name: uniq("user"), Rate: 3, Period: time.Hour})
	global := newLimiter(t, tg.Store, ratelimit.FixedWindow, ratelimit.Limit{Name: uniq("global"), Rate: 4, Period: time.Hour})
	g, err := ratelimit.NewGroup(uniq("api"), user, global)
	if err != nil {
		t.Fatal(err)
	}
	allow := func(u string) (ratelimit.Decision, []ratelimit.Decision) {
		t.Helper()
		c, ds, err := g.AllowN(ctx, []string{u, "all"}, 1)
		if err != nil {
			t.Fatalf("AllowN(%s): %v", u, err)
		}
		return c, ds
	}
	for i := range 3 {
		c, ds := allow("alice")
		if !c.Allowed || ds[0].Remaining != 2-i || ds[1].Remaining != 3-i || c.Remaining != 2-i {
			t.Fatalf("alice %d: %+v %+v", i, c, ds)
		}
	}
	// alice is out: denied by her own limit; the global count is untouched.
	c, ds := allow("alice")
	if c.Allowed || ds[0].Allowed || !ds[1].Allowed || ds[1].Remaining != 1 || c.Limit != user.Limit() || c.RetryAfter != ds[0].RetryAfter {
		t.Fatalf("alice over her limit: %+v %+v", c, ds)
	}
	// bob takes the last global unit.
	if c, ds := allow("bob"); !c.Allowed || ds[1].Remaining != 0 || ds[0].Remaining != 2 {
		t.Fatalf("bob: %+v %+v", c, ds)
	}
	// carol is denied by the global limit; her own count is untouched.
	c, ds = allow("carol")
	if c.Allowed || !ds[0].Allowed || ds[1].Allowed || c.Limit != global.Limit() {
		t.Fatalf("carol over the global limit: %+v %+v", c, ds)
	}
	if _, ds, err := g.Peek(ctx, []string{"carol", "all"}, 0); err != nil || ds[0].Remaining != 3 || ds[1].Remaining != 0 {
		t.Fatalf("after carol's denied request: %+v, %v", ds, err)
	}
	// The group's state is its own: the limiter used alone starts fresh.
	if d, err := user.Peek(ctx, "alice", 0); err != nil || d.Remaining != 3 {
		t.Fatalf("user limiter alone: %+v, %v", d, err)
	}
	if err := g.Reset(ctx, []string{"alice", "all"}); err != nil {
		t.Fatal(err)
	}
	if c, _ := allow("alice"); !c.Allowed {
		t.Fatalf("alice after Reset: %+v", c)
	}
}

// testEveryKeyExpires: every key the limiter writes carries an expiry, no
// longer than the state matters, also after calls that failed: a cut
// connection, a lost reply, a cancelled context, and a decision that read
// a malformed value.
func testEveryKeyExpires(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Store
	var lims []*ratelimit.Limiter
	for _, alg := range Algorithms {
		lims = append(lims, newLimiter(t, s, alg, limitFor(alg, 5, time.Minute)))
	}
	for _, l := range lims {
		for _, k := range []string{"a", "b", "c"} {
			if _, err := l.AllowN(ctx, k, 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	g, err := ratelimit.NewGroup(uniq("grp"), lims...)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.AllowN(ctx, []string{"u", "u", "all", "all"}, 1); err != nil {
		t.Fatal(err)
	}
	c, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Name: uniq("conc"), Permits: 3, TTL: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = p1

	// A lost reply: the write applied, the caller saw an error.
	tg.Faults.DropReplies()
	for _, l := range lims {
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := l.Allow(dctx, "dropped")
		cancel()
		if err == nil || !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("Allow with the reply lost: %v, want ErrUnavailable", err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := c.TryAcquire(dctx, "dropped"); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("TryAcquire with the reply lost: %v, want ErrUnavailable", err)
	}
	cancel()
	tg.Faults.Heal()
	// A cut connection.
	tg.Faults.Cut()
	for _, l := range lims {
		if _, err := l.Allow(ctx, "cut"); !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("Allow while cut: %v, want ErrUnavailable", err)
		}
	}
	tg.Faults.Heal()
	// A cancelled context.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	for _, l := range lims {
		if _, err := l.Allow(cctx, "cancelled"); err == nil {
			t.Fatal("Allow with a cancelled context succeeded")
		}
	}
	// A malformed value in one limit of a group: the decision fails and
	// writes nothing, not even the other limits' state.
	if tg.Poison != nil {
		pg, err := ratelimit.NewGroup(uniq("poison"), lims...)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range lims {
			before := keys(t, tg)
			victim := driver.StateKey{Group: pg.Name(), Kind: code(l.Algorithm()), Name: l.Limit().Name, Key: "p"}
			if err := tg.Poison(ctx, victim); err != nil {
				t.Fatalf("Poison: %v", err)
			}
			ks := []string{"x", "x", "x", "x"}
			ks[i] = "p"
			_, _, err := pg.AllowN(ctx, ks, 1)
			if err == nil {
				t.Fatalf("a group decision over malformed %v state succeeded", l.Algorithm())
			}
			if errors.Is(err, ratelimit.ErrInvalid) {
				t.Fatalf("malformed state reported as invalid input: %v", err)
			}
			after := keys(t, tg)
			if len(after) != len(before)+1 {
				t.Fatalf("a failed decision over malformed %v state changed the keys: %d before (+1 poisoned), %d after\n%v", l.Algorithm(), len(before), len(after), after)
			}
			if err := pg.Reset(ctx, ks); err != nil {
				t.Fatalf("Reset of malformed state: %v", err)
			}
		}
	}
	ks := keys(t, tg)
	if len(ks) < len(lims)*3+len(lims)+1 {
		t.Fatalf("only %d keys stored: %v", len(ks), ks)
	}
	for _, k := range ks {
		if k.TTL <= 0 || k.TTL > bound {
			t.Errorf("key %s has TTL %v, want 0 < TTL <= %v", k.Key, k.TTL, bound)
		}
	}
}
