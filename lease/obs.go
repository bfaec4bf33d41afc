package lease

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease/driver"
)

// Acquisition outcomes (tenure.lease.acquires' outcome attribute).
const (
	acqGranted = iota
	acqHeld
	acqError
)

// telemetry is a Locker's instrumentation; nil when it is off.
type telemetry struct {
	in    *obs.Instruments
	tr    *obs.Tracer
	attrs []attribute.KeyValue // span attributes: store
	acq   [3][]metric.AddOption
	lost  []metric.AddOption
	keys  bool
}

func newTelemetry(s Store, o *Options) *telemetry {
	cfg := obs.Config{MeterProvider: o.MeterProvider, TracerProvider: o.TracerProvider}
	if cfg.Off() {
		return nil
	}
	name := obs.StoreName(s)
	st := obs.KeyStore.String(name)
	t := &telemetry{in: obs.For(o.MeterProvider), tr: obs.NewTracer(o.TracerProvider),
		attrs: []attribute.KeyValue{st}, lost: obs.Opts(st), keys: o.TraceKeys}
	for i, oc := range [...]string{"granted", "held", "error"} {
		t.acq[i] = obs.Opts(st, obs.KeyOutcome.String(oc))
	}
	return t
}

// start begins the span of a primitive operation on key.
func (t *telemetry) start(ctx context.Context, name, key string) (context.Context, obs.Span) {
	if t == nil {
		return ctx, obs.Span{}
	}
	ctx, sp := t.tr.Start(ctx, name, t.attrs)
	if t.keys && sp.Recording() {
		sp.SetAttributes(obs.KeyKey.String(key))
	}
	return ctx, sp
}

// acquired records one acquisition's outcome and ends its span.
func (t *telemetry) acquired(ctx context.Context, sp obs.Span, err error) {
	if t == nil {
		return
	}
	oc := acqGranted
	switch {
	case err == nil:
	case errors.Is(err, ErrHeld):
		oc = acqHeld
	default:
		oc = acqError
	}
	obs.Add(ctx, t.in.LeaseAcquires, t.acq[oc])
	sp.End([...]string{"granted", "held", "error"}[oc], oc == acqError)
}

// lostLease records a lease that ended before its holder released it.
func (t *telemetry) lostLease() {
	if t != nil {
		obs.Add(context.Background(), t.in.LeaseLost, t.lost)
	}
}

// Store-call ops and outcomes (tenure.store.duration).
const (
	opAcquire = iota
	opRenew
	opRelease
	opInspect
)

var (
	storeOps      = []string{"lease.acquire", "lease.renew", "lease.release", "lease.inspect"}
	storeOutcomes = obs.NewOutcomes(obs.Refusal{Name: "held", Err: ErrHeld}, obs.Refusal{Name: "not_held", Err: ErrNotHeld})
)

// timedStore times every call to a Store.
type timedStore struct {
	s Store
	c *obs.Calls
}

func newTimedStore(s Store, t *telemetry) Store {
	if t == nil {
		return s
	}
	return timedStore{s: s, c: obs.NewCalls(t.in, t.tr, obs.StoreName(s), storeOps, storeOutcomes.Names())}
}

func (ts timedStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (Grant, error) {
	cctx, call := ts.c.Start(ctx, opAcquire)
	g, err := ts.s.Acquire(cctx, key, token, ttl)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

// AcquireHolder times AcquireHolder on a store that keeps holders, and a
// plain Acquire on one that does not.
func (ts timedStore) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (Grant, error) {
	cctx, call := ts.c.Start(ctx, opAcquire)
	g, err := driver.AcquireAs(cctx, ts.s, key, token, ttl, holder)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

// AcquireQueued times AcquireQueued; the Locker calls it only on a store
// that is a driver.Queuer.
func (ts timedStore) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (Grant, error) {
	cctx, call := ts.c.Start(ctx, opAcquire)
	g, err := ts.s.(driver.Queuer).AcquireQueued(cctx, key, token, ttl, holder, stay)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

// AcquireHandover times AcquireHandover; the Locker calls it only on a
// store that is a driver.Handover.
func (ts timedStore) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (Grant, error) {
	cctx, call := ts.c.Start(ctx, opAcquire)
	g, err := ts.s.(driver.Handover).AcquireHandover(cctx, key, token, ttl, holder, stay, attempt)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

// Leave gives a place up, on a store that is a driver.Queuer.
func (ts timedStore) Leave(ctx context.Context, key, token string) error {
	return ts.s.(driver.Queuer).Leave(ctx, key, token)
}

func (ts timedStore) Renew(ctx context.Context, key, token string, ttl time.Duration) (Grant, error) {
	cctx, call := ts.c.Start(ctx, opRenew)
	g, err := ts.s.Renew(cctx, key, token, ttl)
	call.End(ctx, storeOutcomes.Of(err))
	return g, err
}

func (ts timedStore) Release(ctx context.Context, key, token string) error {
	cctx, call := ts.c.Start(ctx, opRelease)
	err := ts.s.Release(cctx, key, token)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (ts timedStore) Inspect(ctx context.Context, key string) (Info, error) {
	cctx, call := ts.c.Start(ctx, opInspect)
	info, err := ts.s.Inspect(cctx, key)
	call.End(ctx, storeOutcomes.Of(err))
	return info, err
}

// doOutcome names the outcome of Do or TryDo on its span.
func doOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLost):
		return "lost"
	case errors.Is(err, ErrHeld):
		return "held"
	}
	return "error"
}
