package ratelimit

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Options configure a Limiter or a Concurrency limiter's instrumentation.
// Nil, and a zero field, mean the defaults documented on each field.
// Instrumentation never changes a decision or an error.
type Options struct {
	// MeterProvider supplies the instruments tenure.ratelimit.decisions
	// (attributes store, limit: the limit's Name, decision: allowed,
	// denied or error) and tenure.store.duration (see
	// docs/observability.md). Default: the global provider
	// (otel.GetMeterProvider), so a service that installed an OpenTelemetry
	// SDK gets them without code.
	MeterProvider metric.MeterProvider
	// TracerProvider supplies the spans tenure.ratelimit.allow and
	// tenure.ratelimit.acquire, and a span per store call under a recording
	// span. Default: the global provider (otel.GetTracerProvider). When
	// both providers are the OpenTelemetry no-op providers, instrumentation
	// is off entirely.
	TracerProvider trace.TracerProvider
	// TraceKeys adds the limited key (an IP address, a user) to spans,
	// never to metrics. Default false: keys stay out of telemetry.
	TraceKeys bool
}

// Decisions (tenure.ratelimit.decisions' decision attribute).
const (
	decAllowed = iota
	decDenied
	decError
)

var decisionNames = [...]string{"allowed", "denied", "error"}

// telemetry is one limiter's instrumentation; nil when it is off.
type telemetry struct {
	in    *obs.Instruments
	tr    *obs.Tracer
	calls *obs.Calls
	attrs []attribute.KeyValue // span attributes: store, limit
	dec   [3][]metric.AddOption
	keys  bool
}

func newTelemetry(s Store, name string, o *Options) *telemetry {
	if o == nil {
		o = &Options{}
	}
	if (obs.Config{MeterProvider: o.MeterProvider, TracerProvider: o.TracerProvider}).Off() {
		return nil
	}
	store := obs.StoreName(s)
	t := &telemetry{in: obs.For(o.MeterProvider), tr: obs.NewTracer(o.TracerProvider), keys: o.TraceKeys}
	t.calls = obs.NewCalls(t.in, t.tr, store, storeOps, storeOutcomes.Names())
	t.attrs = []attribute.KeyValue{obs.KeyStore.String(store), obs.KeyLimit.String(name)}
	for i, d := range decisionNames {
		t.dec[i] = obs.Opts(obs.KeyStore.String(store), obs.KeyLimit.String(name), obs.KeyDecision.String(d))
	}
	return t
}

// withName returns t's instrumentation for another limit name (a Group's).
func (t *telemetry) withName(name string) *telemetry {
	if t == nil {
		return nil
	}
	store := t.attrs[0]
	u := &telemetry{in: t.in, tr: t.tr, calls: t.calls, keys: t.keys,
		attrs: []attribute.KeyValue{store, obs.KeyLimit.String(name)}}
	for i, d := range decisionNames {
		u.dec[i] = obs.Opts(store, obs.KeyLimit.String(name), obs.KeyDecision.String(d))
	}
	return u
}

func (t *telemetry) start(ctx context.Context, name, key string) (context.Context, obs.Span) {
	if t == nil {
		return ctx, obs.Span{}
	}
	ctx, sp := t.tr.Start(ctx, name, t.attrs)
	if t.keys && key != "" && sp.Recording() {
		sp.SetAttributes(obs.KeyKey.String(key))
	}
	return ctx, sp
}

// decided records one decision and ends its span.
func (t *telemetry) decided(ctx context.Context, sp obs.Span, allowed bool, err error) {
	if t == nil {
		return
	}
	d := decAllowed
	switch {
	case err != nil && !errors.Is(err, ErrLimited):
		d = decError
	case err != nil, !allowed:
		d = decDenied
	}
	obs.Add(ctx, t.in.RatelimitDecisions, t.dec[d])
	sp.End(decisionNames[d], d == decError)
}

// Store-call ops and outcomes (tenure.store.duration).
const (
	opDecide = iota
	opReset
	opAcquirePermit
	opRenewPermit
	opReleasePermit
)

var (
	storeOps = []string{"ratelimit.decide", "ratelimit.reset", "ratelimit.acquire_permit",
		"ratelimit.renew_permit", "ratelimit.release_permit"}
	storeOutcomes = obs.NewOutcomes(obs.Refusal{Name: "permit_lost", Err: ErrPermitLost})
)

// timedStore times every call to a Store.
type timedStore struct {
	s Store
	c *obs.Calls
}

// timed returns s timed by t (s itself when t is nil) and s's
// single-request path, if it has one: Limiter times the calls to it
// itself (see Limiter.decide), one layer fewer on the path that matters
// most for in-process stores.
func timed(s Store, t *telemetry) (Store, driver.OneDecider) {
	one, _ := s.(driver.OneDecider)
	if t == nil {
		return s, one
	}
	return &timedStore{s: s, c: t.calls}, one
}

func (ts *timedStore) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]Decision, error) {
	cctx, call := ts.c.Start(ctx, opDecide)
	ds, err := ts.s.Decide(cctx, reqs, commit)
	call.End(ctx, storeOutcomes.Of(err))
	return ds, err
}

func (ts *timedStore) Reset(ctx context.Context, keys []driver.StateKey) error {
	cctx, call := ts.c.Start(ctx, opReset)
	err := ts.s.Reset(cctx, keys)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (ts *timedStore) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	cctx, call := ts.c.Start(ctx, opAcquirePermit)
	g, err := ts.s.AcquirePermit(cctx, key, id, permits, ttl)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

func (ts *timedStore) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (driver.PermitGrant, error) {
	cctx, call := ts.c.Start(ctx, opRenewPermit)
	g, err := ts.s.RenewPermit(cctx, key, id, ttl)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

func (ts *timedStore) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	cctx, call := ts.c.Start(ctx, opReleasePermit)
	err := ts.s.ReleasePermit(cctx, key, id)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}
