package obs_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/obs/obstest"
)

type named struct{}

func (named) ObsName() string { return "custom" }

type plain struct{}

func TestStoreName(t *testing.T) {
	ms := newMem(t, nil)
	for _, c := range []struct {
		s    any
		want string
	}{
		{ms.Leases(), "memstore"},
		{ms.Sessions(), "memstore"},
		{ms, "memstore"},
		{named{}, "custom"},
		{&plain{}, "obs_test"},
		{nil, "unknown"},
		{func() {}, "unknown"},
	} {
		if got := obs.StoreName(c.s); got != c.want {
			t.Errorf("StoreName(%T) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestGuardRefusedOn(t *testing.T) {
	tl := obstest.New()
	ctx := context.Background()
	obs.GuardRefusedOn(ctx, tl.Meter, "pgstore", obs.GuardAdmit)
	obs.GuardRefusedOn(ctx, tl.Meter, "pgstore", obs.GuardAdmit)
	obs.GuardRefusedOn(ctx, tl.Meter, "pgstore", obs.GuardCheckHolder)
	if got := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "pgstore", "guard": "admit"}); got != 2 {
		t.Errorf("admit refusals = %d, want 2", got)
	}
	if got := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "pgstore", "guard": "check_holder"}); got != 1 {
		t.Errorf("check_holder refusals = %d, want 1", got)
	}
	// The global provider without an SDK: nothing to record, no panic.
	obs.GuardRefused(ctx, "pgstore", obs.GuardAdmit)
}

func TestForCachesPerProvider(t *testing.T) {
	tl := obstest.New()
	if a, b := obs.For(tl.Meter), obs.For(tl.Meter); a != b {
		t.Error("instruments of one provider are created twice")
	}
	if obs.For(tl.Meter) == obs.For(obstest.New().Meter) {
		t.Error("two providers share instruments")
	}
}

func TestOff(t *testing.T) {
	if !(obs.Config{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}).Off() {
		t.Error("no-op providers do not turn instrumentation off")
	}
	if (obs.Config{}).Off() || (obs.Config{MeterProvider: metricnoop.NewMeterProvider()}).Off() {
		t.Error("the global providers turn instrumentation off")
	}
}

func TestTracerStartsOnlyWhenItCanRecord(t *testing.T) {
	ctx := context.Background()
	attrs := []attribute.KeyValue{obs.KeyStore.String("memstore")}
	// The global provider without an SDK, and the no-op provider: no span,
	// the context comes back as it was.
	for _, tr := range []*obs.Tracer{obs.NewTracer(nil), obs.NewTracer(tracenoop.NewTracerProvider())} {
		got, sp := tr.Start(ctx, "x", attrs)
		if sp.Recording() || got != ctx {
			t.Error("a span was started without a provider that records")
		}
		sp.End("ok", false) // absent span: no-op
	}
	tl := obstest.New()
	tr := obs.NewTracer(tl.Tracer)
	// A store-call span only under a recording parent.
	if _, sp := tr.StartChild(ctx, "child", attrs); sp.Recording() {
		t.Error("a child span was started without a parent")
	}
	pctx, parent := tr.Start(ctx, "parent", attrs)
	if !parent.Recording() {
		t.Fatal("no span from an SDK provider")
	}
	_, child := tr.StartChild(pctx, "child", attrs)
	child.End("unavailable", true)
	parent.End("ok", false)
	spans := tl.Spans()
	if len(spans) != 2 || spans[0].Name() != "child" || spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() {
		t.Fatalf("spans = %v", tl.SpanNames())
	}
	if spans[0].Status().Description != "unavailable" {
		t.Errorf("child status %q", spans[0].Status().Description)
	}
}
