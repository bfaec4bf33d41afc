package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/memstore"
)

// A GCRA limit of 3 per minute per key. The fourth request is refused,
// with the exact time until it would pass.
func Example() {
	ctx := context.Background()
	mem, err := memstore.New(nil) // or sqlitestore, pgstore, redisstore
	if err != nil {
		panic(err)
	}
	store := mem.Limits()
	limiter, err := ratelimit.New(store, ratelimit.GCRA, ratelimit.Limit{Name: "api", Rate: 3, Period: time.Minute}, nil)
	if err != nil {
		panic(err)
	}
	for range 4 {
		d, err := limiter.Allow(ctx, "user:42")
		if err != nil {
			panic(err) // ratelimit.ErrUnavailable: the store did not answer
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=20s
}

// Limits are validated before anything is written.
func ExampleNew_invalid() {
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	store := mem.Limits()
	_, err = ratelimit.New(store, ratelimit.FixedWindow, ratelimit.Limit{Rate: 10, Period: 500 * time.Microsecond}, nil)
	fmt.Println(errors.Is(err, ratelimit.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// ratelimit: invalid argument: period 500µs out of range [1ms, 8784h0m0s]
}

// Peek tells what a request would get without consuming anything.
func ExampleLimiter_Peek() {
	ctx := context.Background()
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	limiter, _ := ratelimit.New(mem.Limits(), ratelimit.SlidingLog, ratelimit.Limit{Rate: 5, Period: time.Second}, nil)
	limiter.AllowN(ctx, "k", 2)
	d, _ := limiter.Peek(ctx, "k", 0)
	fmt.Println("remaining:", d.Remaining)
	d, _ = limiter.Peek(ctx, "k", 4)
	fmt.Println("4 more would pass:", d.Allowed)
	// Output:
	// remaining: 3
	// 4 more would pass: false
}

// A per-user and a global limit, checked together: a request refused by
// one limit is charged to neither.
func ExampleGroup() {
	ctx := context.Background()
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	store := mem.Limits()
	perUser, _ := ratelimit.New(store, ratelimit.GCRA, ratelimit.Limit{Name: "per-user", Rate: 2, Period: time.Minute}, nil)
	global, _ := ratelimit.New(store, ratelimit.FixedWindow, ratelimit.Limit{Name: "global", Rate: 3, Period: time.Minute}, nil)
	g, _ := ratelimit.NewGroup("api", perUser, global)
	for _, user := range []string{"alice", "alice", "alice", "bob", "carol"} {
		d, _, _ := g.AllowN(ctx, []string{user, "all"}, 1)
		if d.Allowed {
			fmt.Printf("%s: allowed\n", user)
		} else {
			fmt.Printf("%s: refused by %s\n", user, d.Limit.Name)
		}
	}
	// Output:
	// alice: allowed
	// alice: allowed
	// alice: refused by per-user
	// bob: allowed
	// carol: refused by global
}

// At most two holders at once; a third fails fast. Permits are leases: one
// whose holder dies expires after the TTL.
func ExampleConcurrency() {
	ctx := context.Background()
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	c, _ := ratelimit.NewConcurrency(mem.Limits(), ratelimit.ConcurrencyLimit{Name: "exports", Permits: 2, TTL: 30 * time.Second}, nil)
	a, _ := c.TryAcquire(ctx, "tenant:7")
	b, _ := c.TryAcquire(ctx, "tenant:7")
	_, err = c.TryAcquire(ctx, "tenant:7")
	var le *ratelimit.LimitedError
	fmt.Println(errors.As(err, &le), le.InUse, "of", le.Permits, "in use")
	fmt.Println("fences increase:", b.Fence() > a.Fence())
	a.Release(ctx)
	p, err := c.TryAcquire(ctx, "tenant:7")
	fmt.Println("after a release:", err == nil, p.Fence() > b.Fence())
	// Output:
	// true 2 of 2 in use
	// fences increase: true
	// after a release: true true
}

// The HTTP middleware: per client IP (IPv6 folded to /64), 429 with an
// integer Retry-After, the RateLimit-Policy and RateLimit fields, and a
// problem+json body.
func ExampleMiddleware() {
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	store := mem.Limits()
	perIP, _ := ratelimit.New(store, ratelimit.FixedWindow, ratelimit.Limit{Name: "per-ip", Rate: 2, Period: time.Minute}, nil)
	m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{
		Rules:     []ratelimit.Rule{{Limiter: perIP, Key: ratelimit.ClientIP(nil)}},
		OnFailure: ratelimit.FailClosed, // the default: 503 when the store is down
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "[2001:db8:1:2::7]:443"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("Retry-After:", ra, w.Header().Get("Content-Type"))
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=60
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=60
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=60
	// Retry-After: 60 application/problem+json
}

// SetHeaders gives an answer the fields Middleware sends, for a service
// that decides outside it.
func ExampleSetHeaders() {
	ms, _ := memstore.New(nil)
	lim, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "api", Rate: 1, Period: time.Minute}, nil)
	ctx := context.Background()
	lim.Allow(ctx, "user-42")
	d, _ := lim.Allow(ctx, "user-42") // the second in a minute: denied
	h := http.Header{}
	ratelimit.SetHeaders(h, []ratelimit.Decision{d})
	fmt.Println(d.Allowed, h.Get("RateLimit-Policy"), h.Get("Retry-After") != "")
	// Output: false "api";q=1;w=60 true
}
