package ratelimit_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// nilStore is a store type whose nil pointer is not a usable store.
type nilStore struct{ ratelimit.Store }

// TestConstructorsRefuseNilAndBadOptions: a nil store (also a typed nil
// pointer) and out-of-range, NaN or infinite options are ErrInvalid, never
// a panic.
func TestConstructorsRefuseNilAndBadOptions(t *testing.T) {
	lim := ratelimit.Limit{Rate: 1, Period: time.Second}
	for _, s := range []ratelimit.Store{nil, (*nilStore)(nil)} {
		if _, err := ratelimit.New(s, ratelimit.GCRA, lim, nil); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("New(%T): %v", s, err)
		}
		if _, err := ratelimit.NewConcurrency(s, ratelimit.ConcurrencyLimit{Permits: 1}, nil); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("NewConcurrency(%T): %v", s, err)
		}
	}
	l, err := ratelimit.New(newMem(t, nil).Limits(), ratelimit.GCRA, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratelimit.NewGroup("g", nil, l); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("NewGroup with a nil first limiter: %v", err)
	}
	if _, err := ratelimit.NewGroup("g", &ratelimit.Limiter{}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("NewGroup with a zero limiter: %v", err)
	}
	rules := []ratelimit.Rule{{Limiter: l, Key: ratelimit.Const("k")}}
	for name, o := range map[string]ratelimit.MiddlewareOptions{
		"NaN share":         {Rules: rules, OnFailure: ratelimit.FailLocal, LocalShare: math.NaN()},
		"+Inf share":        {Rules: rules, OnFailure: ratelimit.FailLocal, LocalShare: math.Inf(1)},
		"-Inf share":        {Rules: rules, OnFailure: ratelimit.FailLocal, LocalShare: math.Inf(-1)},
		"share above 1":     {Rules: rules, OnFailure: ratelimit.FailLocal, LocalShare: 1.5},
		"negative share":    {Rules: rules, OnFailure: ratelimit.FailLocal, LocalShare: -0.5},
		"NaN share, closed": {Rules: rules, LocalShare: math.NaN()},
		"negative timeout":  {Rules: rules, Timeout: -time.Second},
		"bad group name":    {Rules: rules, Group: "a b"},
		"unknown policy":    {Rules: rules, OnFailure: 7},
		"no rules":          {},
		"nil limiter":       {Rules: []ratelimit.Rule{{Key: ratelimit.Const("k")}}},
	} {
		if _, err := ratelimit.NewMiddleware(o); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for _, cl := range []ratelimit.ConcurrencyLimit{{Permits: 0}, {Permits: ratelimit.MaxPermits + 1}, {Permits: 1, TTL: -time.Second}, {Permits: 1, TTL: math.MaxInt64}, {Permits: 1, Name: "a:b"}} {
		if _, err := ratelimit.NewConcurrency(newMem(t, nil).Limits(), cl, nil); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("NewConcurrency(%+v): %v", cl, err)
		}
	}
}
