package ratelimittest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		{"ExpiredStateLeavesNoKeys", testExpiredStateLeavesNoKeys},
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

// bound is the longest TTL any key of testEveryKeyExpires may carry.
const bound = 2*time.Minute + 5*time.Second

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
