package ratelimittest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Algorithms are the rate limit algorithms the suite runs each check with.
var Algorithms = []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingLog, ratelimit.SlidingWindow}

// Run runs the conformance suite. newTarget is called once per subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	target := func(t *testing.T) Target {
		tg := newTarget(t)
		if tg.Store == nil || tg.Keys == nil || tg.Faults == nil {
			t.Fatal("ratelimittest: Target needs Store, Keys and Faults")
		}
		t.Cleanup(tg.Faults.Heal)
		return tg
	}
	// Checks run once per algorithm, each on a target of its own.
	perAlg := []algCase{
		{"ExactCapacity", testExactCapacity},
		{"PeekConsumesNothing", testPeek},
		{"Reset", testReset},
		{"ModelCheck", testModelCheck},
		{"ConcurrentCallers", testConcurrent},
		{"ConcurrentCallersReplay", testConcurrentReplay},
		{"RetryAfterIsExact", testRetryAfter},
		{"SubSecondPeriods", testSubSecond},
		{"SkewedCallersSameAnswers", testSkewedCallers},
	}
	once := []struct {
		name string
		fn   func(t *testing.T, tg Target)
	}{
		{"InvalidInputWritesNothing", testInvalid},
		{"ModelCheckGroup", testModelCheckGroup},
		{"GroupAllOrNothing", testGroup},
		{"EveryKeyExpires", testEveryKeyExpires},
		{"UnavailableIsAnError", testUnavailable},
		{"PermitsLimit", testPermitsLimit},
		{"PermitsUnderConcurrency", testPermitsConcurrent},
		{"PermitExpiresWithoutRenewal", testPermitExpires},
		{"PermitRenewKeepsIt", testPermitRenew},
		{"PermitSameIDReconciles", testPermitSameID},
		{"PermitAcquireWaits", testPermitWaits},
		{"PermitDoKeepsAlive", testPermitDo},
	}
	// A store whose clock is the caller's own cannot be given a caller
	// with a skewed clock: the case does not apply to it.
	if why := target(t).NoBubble; why != "" {
		t.Logf("ratelimittest: SkewedCallersSameAnswers does not apply: %s", why)
		perAlg = slices.DeleteFunc(perAlg, func(c algCase) bool { return c.name == "SkewedCallersSameAnswers" })
	}
	for _, tc := range once[:1] {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, target(t)) })
	}
	for _, tc := range perAlg {
		t.Run(tc.name, func(t *testing.T) {
			for _, alg := range Algorithms {
				t.Run(alg.String(), func(t *testing.T) { tc.fn(t, target(t), alg) })
			}
		})
	}
	for _, tc := range once[1:] {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, target(t)) })
	}
}

// algCase is a check run once per algorithm.
type algCase struct {
	name string
	fn   func(t *testing.T, tg Target, alg ratelimit.Algorithm)
}

var nameSeq atomic.Int64

// uniq returns a limit name unique to this process run.
func uniq(prefix string) string {
	return fmt.Sprintf("%s%d-%s", prefix, nameSeq.Add(1), strings.ToLower(rand.Text()[:6]))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// limitFor returns a limit of the given capacity and period for alg.
func limitFor(alg ratelimit.Algorithm, capacity int, period time.Duration) ratelimit.Limit {
	return ratelimit.Limit{Name: uniq(alg.String()[:4]), Rate: capacity, Period: period}
}

func newLimiter(t testing.TB, s ratelimit.Store, alg ratelimit.Algorithm, l ratelimit.Limit) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(s, alg, l, nil)
	if err != nil {
		t.Fatalf("New(%v, %v): %v", alg, l, err)
	}
	return lim
}

func keys(t testing.TB, tg Target) []KeyTTL {
	t.Helper()
	ks, err := tg.Keys(ctxT(t))
	if err != nil {
		t.Fatalf("Keys: %v", err)
	}
	return ks
}

// wait lets d pass on the store's clock: it moves a driven clock, and
// sleeps otherwise.
func wait(tg Target, d time.Duration) {
	if tg.Clock != nil {
		tg.Clock.Advance(d)
		return
	}
	time.Sleep(d)
}

func testInvalid(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Store
	good := ratelimit.Limit{Name: uniq("inv"), Rate: 5, Period: time.Second}
	bad := []struct {
		name string
		alg  ratelimit.Algorithm
		l    ratelimit.Limit
	}{
		{"zero rate", ratelimit.GCRA, ratelimit.Limit{Rate: 0, Period: time.Second}},
		{"negative rate", ratelimit.FixedWindow, ratelimit.Limit{Rate: -1, Period: time.Second}},
		{"rate above max", ratelimit.GCRA, ratelimit.Limit{Rate: ratelimit.MaxRate + 1, Period: time.Second}},
		{"log rate above max", ratelimit.SlidingLog, ratelimit.Limit{Rate: ratelimit.MaxLogRate + 1, Period: time.Second}},
		{"zero period", ratelimit.GCRA, ratelimit.Limit{Rate: 1}},
		{"negative period", ratelimit.SlidingWindow, ratelimit.Limit{Rate: 1, Period: -time.Second}},
		{"period below min", ratelimit.FixedWindow, ratelimit.Limit{Rate: 1, Period: 999 * time.Microsecond}},
		{"period not whole µs", ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Millisecond + 500}},
		{"period above max", ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: ratelimit.MaxPeriod + time.Second}},
		{"negative burst", ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Second, Burst: -1}},
		{"burst above max", ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Second, Burst: ratelimit.MaxRate + 1}},
		{"burst on a window", ratelimit.FixedWindow, ratelimit.Limit{Rate: 5, Period: time.Second, Burst: 7}},
		{"bucket refills too slowly", ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: ratelimit.MaxPeriod, Burst: 2}},
		{"name with colon", ratelimit.GCRA, ratelimit.Limit{Name: "a:b", Rate: 1, Period: time.Second}},
		{"name with space", ratelimit.GCRA, ratelimit.Limit{Name: "a b", Rate: 1, Period: time.Second}},
		{"long name", ratelimit.GCRA, ratelimit.Limit{Name: strings.Repeat("n", ratelimit.MaxNameLen+1), Rate: 1, Period: time.Second}},
		{"unknown algorithm", ratelimit.Algorithm(9), ratelimit.Limit{Rate: 1, Period: time.Second}},
	}
	for _, c := range bad {
		if _, err := ratelimit.New(s, c.alg, c.l, nil); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("New %s: %v, want ErrInvalid", c.name, err)
		}
	}
	long := strings.Repeat("k", ratelimit.MaxKeyLen+1)
	for _, alg := range Algorithms {
		l := newLimiter(t, s, alg, good)
		calls := map[string]func() error{
			"empty key":       func() error { _, err := l.Allow(ctx, ""); return err },
			"long key":        func() error { _, err := l.Allow(ctx, long); return err },
			"bad utf8 key":    func() error { _, err := l.Allow(ctx, "\xff\xfe"); return err },
			"key with NUL":    func() error { _, err := l.Allow(ctx, "a\x00b"); return err },
			"zero cost":       func() error { _, err := l.AllowN(ctx, "k", 0); return err },
			"negative cost":   func() error { _, err := l.AllowN(ctx, "k", -1); return err },
			"cost over":       func() error { _, err := l.AllowN(ctx, "k", 6); return err },
			"peek negative":   func() error { _, err := l.Peek(ctx, "k", -1); return err },
			"peek over":       func() error { _, err := l.Peek(ctx, "k", 6); return err },
			"reset empty key": func() error { return l.Reset(ctx, "") },
			"group bad name":  func() error { _, err := ratelimit.NewGroup("a:b", l); return err },
			"group duplicate": func() error { _, err := ratelimit.NewGroup("g", l, l); return err },
			"group empty":     func() error { _, err := ratelimit.NewGroup("g"); return err },
			"group wrong keys": func() error {
				g, _ := ratelimit.NewGroup("g", l)
				_, _, err := g.AllowN(ctx, []string{"a", "b"}, 1)
				return err
			},
			"group cost over": func() error {
				g, _ := ratelimit.NewGroup("g", l)
				_, _, err := g.AllowN(ctx, []string{"a"}, 6)
				return err
			},
			"group bad key": func() error {
				g, _ := ratelimit.NewGroup("g", l)
				_, _, err := g.AllowN(ctx, []string{""}, 1)
				return err
			},
			"store unnormalized": func() error {
				_, err := s.Decide(ctx, []driver.Request{{Key: driver.StateKey{Name: "x", Kind: "g", Key: "k"}, Algorithm: alg, Limit: ratelimit.Limit{Rate: 5, Period: time.Second}, N: 1}}, true)
				return err
			},
			"store cost over": func() error {
				_, err := s.Decide(ctx, []driver.Request{{Key: driver.StateKey{Name: "x", Kind: "g", Key: "k"}, Algorithm: alg, Limit: l.Limit(), N: 6}}, true)
				return err
			},
			"store empty key": func() error {
				_, err := s.Decide(ctx, []driver.Request{{Algorithm: alg, Limit: l.Limit(), N: 1}}, true)
				return err
			},
			"store no requests": func() error { _, err := s.Decide(ctx, nil, true); return err },
			"store duplicate keys": func() error {
				k := driver.StateKey{Name: "x", Kind: "g", Key: "k"}
				r := driver.Request{Key: k, Algorithm: alg, Limit: l.Limit(), N: 1}
				_, err := s.Decide(ctx, []driver.Request{r, r}, true)
				return err
			},
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ratelimit.ErrInvalid) {
				t.Errorf("%v %s: %v, want ErrInvalid", alg, name, err)
			}
		}
	}
	pk := driver.StateKey{Name: "x", Kind: "p", Key: "k"}
	badPermits := map[string]func() error{
		"zero permits": func() error {
			_, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 0}, nil)
			return err
		},
		"too many": func() error {
			_, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: ratelimit.MaxPermits + 1}, nil)
			return err
		},
		"short ttl": func() error {
			_, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 1, TTL: 500 * time.Microsecond}, nil)
			return err
		},
		"long ttl": func() error {
			_, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 1, TTL: 25 * time.Hour}, nil)
			return err
		},
		"bad name": func() error {
			_, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Name: "a b", Permits: 1}, nil)
			return err
		},
		"store bad id":   func() error { _, err := s.AcquirePermit(ctx, pk, "has space", 1, time.Second); return err },
		"store long id":  func() error { _, err := s.AcquirePermit(ctx, pk, strings.Repeat("i", 65), 1, time.Second); return err },
		"store 0 perm":   func() error { _, err := s.AcquirePermit(ctx, pk, "id", 0, time.Second); return err },
		"store bad ttl":  func() error { _, err := s.AcquirePermit(ctx, pk, "id", 1, 0); return err },
		"renew bad ttl":  func() error { _, err := s.RenewPermit(ctx, pk, "id", -time.Second); return err },
		"release no key": func() error { return s.ReleasePermit(ctx, driver.StateKey{}, "id") },
		"reset no keys":  func() error { return s.Reset(ctx, nil) },
		"try bad key": func() error {
			c, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Name: uniq("p"), Permits: 1}, nil)
			if err != nil {
				return err
			}
			_, err = c.TryAcquire(ctx, "")
			return err
		},
	}
	for name, call := range badPermits {
		if err := call(); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("permits %s: %v, want ErrInvalid", name, err)
		}
	}
	if ks := keys(t, tg); len(ks) != 0 {
		t.Fatalf("invalid calls wrote %d keys: %v", len(ks), ks)
	}
	// A valid call afterwards works.
	l := newLimiter(t, s, ratelimit.GCRA, good)
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("a valid Allow after the invalid ones: %+v, %v", d, err)
	}
}

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
	period := 200 * time.Millisecond
	lim := limitFor(alg, 3, period)
	l := newLimiter(t, tg.Store, alg, lim)
	if _, err := l.AllowN(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	wait(tg, period/4)
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(ctx, "k", 2)
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

// bound is the longest TTL any key of testEveryKeyExpires may carry.
const bound = 2*time.Minute + 5*time.Second

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

// code is the short form of an algorithm in state keys.
func code(a ratelimit.Algorithm) string {
	return map[ratelimit.Algorithm]string{ratelimit.GCRA: "g", ratelimit.FixedWindow: "f", ratelimit.SlidingLog: "l", ratelimit.SlidingWindow: "w"}[a]
}

func testUnavailable(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Store
	l := newLimiter(t, s, ratelimit.GCRA, limitFor(ratelimit.GCRA, 5, time.Minute))
	g, _ := ratelimit.NewGroup(uniq("g"), l)
	c, _ := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Name: uniq("c"), Permits: 1, TTL: time.Minute}, nil)
	held, err := c.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	tg.Faults.Cut()
	calls := map[string]func() error{
		"Allow":      func() error { d, err := l.Allow(ctx, "k"); return allowedErr(d, err) },
		"Peek":       func() error { d, err := l.Peek(ctx, "k", 1); return allowedErr(d, err) },
		"Reset":      func() error { return l.Reset(ctx, "k") },
		"GroupAllow": func() error { d, _, err := g.AllowN(ctx, []string{"k"}, 1); return allowedErr(d, err) },
		"TryAcquire": func() error { _, err := c.TryAcquire(ctx, "k"); return err },
		"Renew":      func() error { return held.Renew(ctx) },
		"Release":    func() error { return held.Release(ctx) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Errorf("%s while cut off: %v, want ErrUnavailable", name, err)
		}
	}
	tg.Faults.Heal()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := l.Allow(ctx, "k")
		if err == nil {
			if !d.Allowed {
				t.Fatalf("after healing: %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after healing: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after healing: %v", err)
	}
}

// allowedErr turns an "allowed" answer that came with an error into a
// failure of its own: a store error must never read as allowed.
func allowedErr(d ratelimit.Decision, err error) error {
	if d.Allowed {
		return fmt.Errorf("allowed although the store failed (%v)", err)
	}
	return err
}

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

func testPermitWaits(t *testing.T, tg Target) {
	ctx := ctxT(t)
	c := newConcurrency(t, tg.Store, 1, time.Minute)
	held, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// Nobody releases: Acquire gives up when its context ends. The deadline
	// leaves a loaded store time to answer at least once (the error wraps
	// the last ErrLimited it saw).
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Acquire(sctx, "job")
	cancel()
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
	ttl := 600 * time.Millisecond
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
