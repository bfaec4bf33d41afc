package server

import (
	"context"
	crand "crypto/rand"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// rateOps are the operations on rate limits: ratelimit.Store's Decide and
// Reset.
var rateOps = []operation{
	&op[serveapi.RateAllow, serveapi.RateDecisions]{Method: "POST", Path: "/v1/rate/allow", ID: "allowRate",
		Needs: rateView, Required: []string{"requests[].limit"}, OneOf: [][]string{{"requests[].key", "requests[].state"}}, Handle: allowRate,
		Doc:     "Judge up to 16 limits in one atomic step on the store's clock: all are consumed if all allow, none otherwise (peek: nothing is consumed). The answer carries the RateLimit-Policy and RateLimit fields the Go middleware sends, and Retry-After (whole seconds) when the limits deny.",
		Example: serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "user-42", Limit: &serveapi.Limit{Name: "api", Rate: 2, Period: serveapi.Duration(time.Minute)}}}}},
	&op[serveapi.RateReset, noBody]{Method: "POST", Path: "/v1/rate/reset", ID: "resetRate",
		Needs: rateView, OneOf: [][]string{{"requests[].key+requests[].limit", "requests[].state"}}, Handle: resetRate,
		Doc:     "Forget the state of limits: they are fully available again.",
		Example: serveapi.RateReset{Requests: []serveapi.RateRequest{{Key: "user-42", Limit: &serveapi.Limit{Name: "api", Rate: 2, Period: serveapi.Duration(time.Minute)}}}}},
}

// permitOps are the operations on concurrency permits: ratelimit.Store's
// AcquirePermit, RenewPermit and ReleasePermit.
var permitOps = []operation{
	&op[serveapi.Permit, serveapi.PermitGrant]{Method: "POST", Path: "/v1/permits/acquire", ID: "acquirePermit",
		Needs: rateView, Required: []string{"permits", "ttl"}, OneOf: permitRef,
		Doc:     "Take one of permits concurrency permits on a key for ttl (acquired false when all are held).",
		Example: serveapi.Permit{Key: "export-jobs", Name: "exports", Permits: 2, TTL: serveapi.Duration(time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.Permit) (serveapi.PermitGrant, error) {
			k, err := r.permitKey(in)
			if err != nil {
				return serveapi.PermitGrant{}, err
			}
			id := in.ID
			if id == "" {
				id = crand.Text()
			}
			g, err := r.s.st.Limits.AcquirePermit(ctx, k, id, in.Permits, in.TTL.D())
			return permitOut(id, g), err
		}},
	&op[serveapi.Permit, serveapi.PermitGrant]{Method: "POST", Path: "/v1/permits/renew", ID: "renewPermit",
		Needs: rateView, Required: []string{"id", "ttl"}, OneOf: permitRef, Problems: []string{"lost"},
		Doc:     "Extend a held permit to ttl from now.",
		Example: serveapi.Permit{Key: "export-jobs", Name: "exports", ID: "QJ3V7ZK2M4XW", TTL: serveapi.Duration(time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.Permit) (serveapi.PermitGrant, error) {
			k, err := r.permitKey(in)
			if err != nil {
				return serveapi.PermitGrant{}, err
			}
			g, err := r.s.st.Limits.RenewPermit(ctx, k, in.ID, in.TTL.D())
			return permitOut(in.ID, g), err
		}},
	&op[serveapi.Permit, noBody]{Method: "POST", Path: "/v1/permits/release", ID: "releasePermit",
		Needs: rateView, Required: []string{"id"}, OneOf: permitRef, Problems: []string{"lost"},
		Doc:     "Free a held permit.",
		Example: serveapi.Permit{Key: "export-jobs", Name: "exports", ID: "QJ3V7ZK2M4XW"},
		Handle: func(ctx context.Context, r *request, in serveapi.Permit) (noBody, error) {
			k, err := r.permitKey(in)
			if err != nil {
				return noBody{}, err
			}
			return noBody{}, r.s.st.Limits.ReleasePermit(ctx, k, in.ID)
		}},
}

// permitRef is how a permit request names its state: the exact state
// key, or the caller's key and the limit's name.
var permitRef = [][]string{{"state", "key+name"}}

// algorithms maps the wire names to algorithms ("" is the default).
var algorithms = map[string]ratelimit.Algorithm{
	"": ratelimit.GCRA, "gcra": ratelimit.GCRA, "fixed-window": ratelimit.FixedWindow,
	"sliding-log": ratelimit.SlidingLog, "sliding-window": ratelimit.SlidingWindow,
}

// stateKey is the state key a request names, checked: a permit's
// (permit) or a rate limit's.
func stateKey(k serveapi.StateKey, permit bool) (driver.StateKey, error) {
	dk := driver.StateKey{Group: k.Group, Name: k.Name, Kind: k.Kind, Key: k.Key}
	if err := driver.ValidateStateKey(dk); err != nil {
		return dk, err
	}
	if permit != (dk.Kind == "p") {
		if permit {
			return dk, invalidf("state kind %q is a rate limit's; a permit's is p", dk.Kind)
		}
		return dk, invalidf("state kind p is a permit's; a rate limit's is g, f, l or w")
	}
	return dk, nil
}

func stateKeyOut(k driver.StateKey) serveapi.StateKey {
	return serveapi.StateKey{Group: k.Group, Name: k.Name, Kind: k.Kind, Key: k.Key}
}

// uninstrumented builds the limiters of rateRequest without telemetry: they
// only validate and normalize a limit and derive state keys (the store is
// called directly), and setting up a limiter's instruments for every
// request would cost more than the rest of the request's handling.
var uninstrumented = &ratelimit.Options{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}

// rateRequest builds the store request of one wire request: the limit is
// validated and normalized by ratelimit.New, the state key is the one
// given or the single limiter's, and it must lie in the token's
// namespaces.
func (r *request) rateRequest(in serveapi.RateRequest) (driver.Request, error) {
	alg, ok := algorithms[in.Algorithm]
	if !ok {
		return driver.Request{}, invalidf("unknown algorithm %q (gcra, fixed-window, sliding-log, sliding-window)", in.Algorithm)
	}
	l := in.TheLimit()
	lim, err := ratelimit.New(r.s.st.Limits, alg, ratelimit.Limit{Name: l.Name, Rate: l.Rate, Period: l.Period.D(), Burst: l.Burst}, uninstrumented)
	if err != nil {
		return driver.Request{}, err
	}
	var key driver.StateKey
	switch {
	case in.State != nil && in.Key != "":
		return driver.Request{}, invalidf("give key or state, not both")
	case in.State != nil:
		if key, err = stateKey(*in.State, false); err != nil {
			return driver.Request{}, err
		}
	default:
		if key, err = lim.StateKey(in.Key); err != nil {
			return driver.Request{}, err
		}
	}
	if err := r.guard("rate limit key", key.Key); err != nil {
		return driver.Request{}, err
	}
	n := 1
	if in.N != nil {
		n = *in.N
	}
	return driver.Request{Key: key, Algorithm: alg, Limit: lim.Limit(), N: n}, nil
}

// groupSize checks the number of requests of one allow or reset.
func groupSize(n int, what string) error {
	if n == 0 || n > ratelimit.MaxGroup {
		return invalidf("%d %s, want 1 to %d", n, what, ratelimit.MaxGroup)
	}
	return nil
}

func allowRate(ctx context.Context, r *request, in serveapi.RateAllow) (serveapi.RateDecisions, error) {
	if err := groupSize(len(in.Requests), "requests"); err != nil {
		return serveapi.RateDecisions{}, err
	}
	reqs := make([]driver.Request, 0, len(in.Requests))
	for _, rr := range in.Requests {
		dr, err := r.rateRequest(rr)
		if err != nil {
			return serveapi.RateDecisions{}, err
		}
		reqs = append(reqs, dr)
	}
	ds, err := r.s.st.Limits.Decide(ctx, reqs, !in.Peek)
	if err != nil {
		return serveapi.RateDecisions{}, err
	}
	if r.header != nil {
		// The fields the Go middleware sends, so that a client in any
		// language can pass them on to its own callers.
		ratelimit.SetHeaders(r.header, ds)
	}
	out := serveapi.RateDecisions{Allowed: true, Decisions: make([]serveapi.RateDecision, 0, len(ds))}
	for i, d := range ds {
		out.Allowed = out.Allowed && d.Allowed
		out.Decisions = append(out.Decisions, serveapi.RateDecision{
			Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: serveapi.Duration(d.RetryAfter), ResetAfter: serveapi.Duration(d.ResetAfter),
			Limit:     serveapi.Limit{Name: d.Limit.Name, Rate: d.Limit.Rate, Period: serveapi.Duration(d.Limit.Period), Burst: d.Limit.Burst},
			Algorithm: d.Algorithm.String(), At: d.At, State: stateKeyOut(reqs[i].Key),
		})
	}
	return out, nil
}

func resetRate(ctx context.Context, r *request, in serveapi.RateReset) (noBody, error) {
	if err := groupSize(len(in.Requests), "keys"); err != nil {
		return noBody{}, err
	}
	keys := make([]driver.StateKey, 0, len(in.Requests))
	for _, rr := range in.Requests {
		if rr.State != nil && rr.Key == "" {
			// The exact state key: no limit needed.
			k, err := stateKey(*rr.State, false)
			if err != nil {
				return noBody{}, err
			}
			if err := r.guard("rate limit key", k.Key); err != nil {
				return noBody{}, err
			}
			keys = append(keys, k)
			continue
		}
		dr, err := r.rateRequest(rr)
		if err != nil {
			return noBody{}, err
		}
		keys = append(keys, dr.Key)
	}
	return noBody{}, r.s.st.Limits.Reset(ctx, keys)
}

// permitKey is the state key of a permit request, in the token's
// namespaces.
func (r *request) permitKey(in serveapi.Permit) (driver.StateKey, error) {
	var k driver.StateKey
	switch {
	case in.State != nil && (in.Key != "" || in.Name != ""):
		return k, invalidf("give state, or key and name, not both")
	case in.State != nil:
		var err error
		if k, err = stateKey(*in.State, true); err != nil {
			return k, err
		}
	default:
		if err := driver.ValidateKey(in.Key); err != nil {
			return k, err
		}
		k = driver.StateKey{Name: in.Name, Kind: "p", Key: in.Key}
	}
	if k.Name == "" || k.Key == "" || k.Kind == "" {
		return k, invalidf("a permit needs a key and a limit name")
	}
	return k, r.guard("permit key", k.Key)
}

func permitOut(id string, g driver.PermitGrant) serveapi.PermitGrant {
	return serveapi.PermitGrant{ID: id, Acquired: g.Acquired, Fence: g.Fence, InUse: g.InUse,
		RetryAfter: serveapi.Duration(g.RetryAfter), TTL: serveapi.Duration(g.TTL), At: g.At}
}
