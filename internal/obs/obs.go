// Package obs is the one place where tenure's OpenTelemetry signals are
// named and recorded: instrument names, attribute keys and values, span
// names, and the fast path that keeps instrumentation nearly free when no
// OpenTelemetry SDK is installed.
//
// Instrumentation is a side channel: nothing here changes a decision or an
// error. Metric attribute values are low-cardinality (store, outcome, limit
// and job names); keys, user IDs and tokens never become attribute values,
// and keys appear on spans only where a component's options allow it.
package obs

import (
	"context"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every meter and tracer tenure
// uses.
const ScopeName = "github.com/tenurekit/tenure"

// Instrument names: a public contract, documented in docs/observability.md.
const (
	LeaseAcquires       = "tenure.lease.acquires"
	LeaseLost           = "tenure.lease.lost"
	GuardRefusals       = "tenure.guard.refusals"
	IdempotencyRequests = "tenure.idempotency.requests"
	RatelimitDecisions  = "tenure.ratelimit.decisions"
	SessionOperations   = "tenure.session.operations"
	ScheduleSlots       = "tenure.schedule.slots"
	StoreDuration       = "tenure.store.duration"
)

// Attribute keys.
const (
	KeyStore    = attribute.Key("store")
	KeyOutcome  = attribute.Key("outcome")
	KeyGuard    = attribute.Key("guard")
	KeyLimit    = attribute.Key("limit")
	KeyDecision = attribute.Key("decision")
	KeyOp       = attribute.Key("op")
	KeyJob      = attribute.Key("job")
	KeyState    = attribute.Key("state")
	// KeyKey carries a lease key, idempotency key or limiter key on spans,
	// only where a component's options allow keys. Never on metrics.
	KeyKey = attribute.Key("tenure.key")
	// KeyScope carries an idempotency scope on spans, under the same rule.
	KeyScope = attribute.Key("tenure.scope")
)

// Store-call outcomes shared by every component (tenure.store.duration's
// outcome attribute). A component adds its own refusals (held, not_held,
// conflict, ...) after these.
const (
	OutcomeOK          = "ok"
	OutcomeInvalid     = "invalid"
	OutcomeUnavailable = "unavailable"
	OutcomeError       = "error"
)

// Config selects the providers; a nil field means the global provider
// (otel.GetMeterProvider, otel.GetTracerProvider) at the time of the call.
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Off reports whether c turns instrumentation off entirely: both providers
// are the OpenTelemetry no-op providers. Components then skip every wrapper.
func (c Config) Off() bool {
	_, m := c.MeterProvider.(metricnoop.MeterProvider)
	_, t := c.TracerProvider.(tracenoop.TracerProvider)
	return m && t
}

// Instruments are tenure's instruments from one MeterProvider. They are
// created once per provider and shared by every component using it.
type Instruments struct {
	LeaseAcquires       metric.Int64Counter
	LeaseLost           metric.Int64Counter
	GuardRefusals       metric.Int64Counter
	IdempotencyRequests metric.Int64Counter
	RatelimitDecisions  metric.Int64Counter
	SessionOperations   metric.Int64Counter
	ScheduleSlots       metric.Int64Counter
	StoreDuration       metric.Float64Histogram
}

var instruments sync.Map // metric.MeterProvider -> *Instruments

// For returns the instruments of mp (nil: the global provider). An error
// from the provider leaves that instrument a no-op.
func For(mp metric.MeterProvider) *Instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	cacheable := reflect.TypeOf(mp).Comparable()
	if cacheable {
		if v, ok := instruments.Load(mp); ok {
			return v.(*Instruments)
		}
	}
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(version()))
	noop := metricnoop.Meter{}
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		if err != nil {
			otel.Handle(err)
			c, _ = noop.Int64Counter(name)
		}
		return c
	}
	in := &Instruments{
		LeaseAcquires:       counter(LeaseAcquires, "Lease acquisitions by outcome.", "{acquire}"),
		LeaseLost:           counter(LeaseLost, "Leases that ended before their holder released them.", "{lease}"),
		GuardRefusals:       counter(GuardRefusals, "Writes a resource-side guard refused (stale fence, holder no longer current).", "{write}"),
		IdempotencyRequests: counter(IdempotencyRequests, "Idempotent requests by outcome.", "{request}"),
		RatelimitDecisions:  counter(RatelimitDecisions, "Rate-limit decisions by limit and decision.", "{decision}"),
		SessionOperations:   counter(SessionOperations, "Session operations by operation and outcome.", "{operation}"),
		ScheduleSlots:       counter(ScheduleSlots, "Scheduled slots by job and state.", "{slot}"),
	}
	h, err := m.Float64Histogram(StoreDuration, metric.WithDescription("Duration of every store call tenure makes."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	if err != nil {
		otel.Handle(err)
		h, _ = noop.Float64Histogram(StoreDuration)
	}
	in.StoreDuration = h
	if cacheable {
		v, _ := instruments.LoadOrStore(mp, in)
		return v.(*Instruments)
	}
	return in
}

// Opts precomputes the option list for one attribute set, so recording
// allocates nothing: pass it as c.Add(ctx, 1, opts...).
func Opts(kvs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// RecordOpts is Opts for histograms.
func RecordOpts(kvs ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// Add adds one to c with the precomputed opts, if c is enabled.
func Add(ctx context.Context, c metric.Int64Counter, opts []metric.AddOption) {
	if c.Enabled(ctx) {
		c.Add(ctx, 1, opts...)
	}
}

// Namer is implemented by stores that name themselves for the store
// attribute ("memstore", "pgstore", ...).
type Namer interface {
	ObsName() string
}

// StoreName returns the store attribute value for s: its ObsName if it has
// one, otherwise the last element of its Go type's package path
// ("memstore" for a view of store/memstore), or "unknown".
func StoreName(s any) string {
	if n, ok := s.(Namer); ok {
		if name := n.ObsName(); name != "" {
			return name
		}
	}
	t := reflect.TypeOf(s)
	for t != nil && t.Kind() == reflect.Pointer && t.PkgPath() == "" {
		t = t.Elem()
	}
	if t == nil || t.PkgPath() == "" {
		return "unknown"
	}
	p := t.PkgPath()
	return p[strings.LastIndexByte(p, '/')+1:]
}

var versionOnce = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == ScopeName && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == ScopeName {
			return d.Version
		}
	}
	return ""
})

func version() string { return versionOnce() }

// Tracer starts tenure's spans from one TracerProvider (nil: the global
// one, looked up on each use so a provider installed later takes effect).
type Tracer struct {
	tp     trace.TracerProvider // nil: global
	tracer trace.Tracer         // when tp is set
	live   bool                 // when tp is set
}

// NewTracer returns a Tracer on tp (nil: the global provider).
func NewTracer(tp trace.TracerProvider) *Tracer {
	t := &Tracer{tp: tp}
	if tp != nil {
		t.live = liveProvider(tp)
		t.tracer = tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version()))
	}
	return t
}

type globalTracer struct {
	tp     trace.TracerProvider
	live   bool
	tracer trace.Tracer
}

var lastGlobal atomic.Pointer[globalTracer]

// current returns the tracer to use and whether it can record.
func (t *Tracer) current() (trace.Tracer, bool) {
	if t.tp != nil {
		return t.tracer, t.live
	}
	tp := otel.GetTracerProvider()
	if g := lastGlobal.Load(); g != nil && g.tp == tp {
		return g.tracer, g.live
	}
	g := &globalTracer{tp: tp, live: liveProvider(tp), tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version()))}
	lastGlobal.Store(g)
	return g.tracer, g.live
}

// liveProvider reports whether tp can produce recording spans: it is
// neither a no-op provider nor the global placeholder that stands in until
// an SDK is installed.
func liveProvider(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.PkgPath() {
	case "go.opentelemetry.io/otel/internal/global", "go.opentelemetry.io/otel/trace/noop", "go.opentelemetry.io/otel/trace":
		return false
	}
	return true
}

// Start starts an internal span for a primitive operation when the
// provider can record or the context already carries a recording span. It
// returns ctx unchanged and an absent Span otherwise, so the no-op path
// allocates nothing. attrs should be a slice kept by the caller (a
// variadic list would be built on every call).
func (t *Tracer) Start(ctx context.Context, name string, attrs []attribute.KeyValue) (context.Context, Span) {
	tr, live := t.current()
	if !live && !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, Span{}
	}
	ctx, s := tr.Start(ctx, name, trace.WithAttributes(attrs...))
	if !s.IsRecording() {
		s.End()
		return ctx, Span{}
	}
	return ctx, Span{s}
}

// StartChild starts a client span only under a recording parent span
// (store calls: a store call on its own is not worth a trace).
func (t *Tracer) StartChild(ctx context.Context, name string, attrs []attribute.KeyValue) (context.Context, Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, Span{}
	}
	tr, _ := t.current()
	ctx, s := tr.Start(ctx, name, trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindClient))
	return ctx, Span{s}
}

// Span is a span that may be absent (the no-op path); its methods do
// nothing then.
type Span struct{ s trace.Span }

// Recording reports whether the span records.
func (s Span) Recording() bool { return s.s != nil }

// SetAttributes adds attributes to a recording span. Check Recording
// before building the list: the variadic slice is allocated on every call.
func (s Span) SetAttributes(kvs ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(kvs...)
	}
}

// End ends the span with outcome as an attribute; failed marks its status
// as an error with the outcome as description (never the error's text,
// which can hold keys).
func (s Span) End(outcome string, failed bool) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(KeyOutcome.String(outcome))
	if failed {
		s.s.SetStatus(codes.Error, outcome)
	}
	s.s.End()
}
