package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/ratelimit"
)

func TestTelemetryCountsDecisions(t *testing.T) {
	tl := obstest.New()
	o := &ratelimit.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer}
	store := newMem(t, nil).Limits()
	ctx := context.Background()
	l, err := ratelimit.New(store, ratelimit.GCRA, ratelimit.Limit{Name: "api", Rate: 2, Period: time.Minute}, o)
	if err != nil {
		t.Fatal(err)
	}
	var allowed []bool
	for range 3 {
		d, err := l.Allow(ctx, "user:42")
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, d.Allowed)
	}
	if !slices.Equal(allowed, []bool{true, true, false}) {
		t.Fatalf("decisions %v, want true true false", allowed)
	}
	if _, err := l.Peek(ctx, "user:42", 1); err != nil { // not a decision
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, ""); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	for d, want := range map[string]int64{"allowed": 2, "denied": 1, "error": 1} {
		if got := tl.Count(t, "tenure.ratelimit.decisions", map[string]string{"store": "memstore", "limit": "api", "decision": d}); got != want {
			t.Errorf("decisions{decision=%s} = %d, want %d", d, got, want)
		}
	}
	// 3 AllowN and a Peek reached the store.
	if got := tl.Observations(t, "tenure.store.duration", map[string]string{"store": "memstore", "op": "ratelimit.decide", "outcome": "ok"}); got != 4 {
		t.Errorf("store.duration{op=ratelimit.decide} has %d values, want 4", got)
	}

	// A group counts one decision under its own name.
	global, _ := ratelimit.New(store, ratelimit.FixedWindow, ratelimit.Limit{Name: "global", Rate: 100, Period: time.Minute}, o)
	g, err := ratelimit.NewGroup("user-and-global", l, global)
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := g.AllowN(ctx, []string{"user:7", "all"}, 1); err != nil || !d.Allowed {
		t.Fatalf("group: %v %v", d, err)
	}
	if got := tl.Count(t, "tenure.ratelimit.decisions", map[string]string{"limit": "user-and-global", "decision": "allowed"}); got != 1 {
		t.Errorf("group decisions = %d, want 1", got)
	}

	// Concurrency permits count as decisions too.
	c, err := ratelimit.NewConcurrency(store, ratelimit.ConcurrencyLimit{Name: "exports", Permits: 1}, o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.TryAcquire(ctx, "tenant-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "tenant-1"); !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("second permit: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]int64{"allowed": 1, "denied": 1} {
		if got := tl.Count(t, "tenure.ratelimit.decisions", map[string]string{"limit": "exports", "decision": d}); got != want {
			t.Errorf("permit decisions{decision=%s} = %d, want %d", d, got, want)
		}
	}
	if got := tl.Observations(t, "tenure.store.duration", map[string]string{"op": "ratelimit.release_permit", "outcome": "ok"}); got != 1 {
		t.Errorf("release_permit timed %d times, want 1", got)
	}
	// Keys never become attribute values.
	for _, v := range tl.AttributeValues(t) {
		if v == "user:42" || v == "tenant-1" || v == "user:7" {
			t.Errorf("key %q is an attribute value", v)
		}
	}
	if !slices.Contains(tl.SpanNames(), "tenure.ratelimit.allow") || !slices.Contains(tl.SpanNames(), "tenure.store.ratelimit.decide") {
		t.Errorf("spans %q", tl.SpanNames())
	}
}

// BenchmarkGCRAAllow measures a GCRA decision on memstore with
// instrumentation off (no-op providers), with the global providers and no
// SDK installed (the default for a service without OpenTelemetry), and with
// the SDK collecting metrics and spans.
func BenchmarkGCRAAllow(b *testing.B) {
	tl := obstest.New()
	for _, c := range []struct {
		name string
		o    *ratelimit.Options
	}{
		{"off", &ratelimit.Options{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}},
		{"global-noop", nil},
		{"sdk", &ratelimit.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer}},
		{"sdk-metrics-only", &ratelimit.Options{MeterProvider: tl.Meter, TracerProvider: tracenoop.NewTracerProvider()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.o == nil && otel.GetMeterProvider() == nil {
				b.Fatal("no global provider")
			}
			l, err := ratelimit.New(newMem(b, nil).Limits(), ratelimit.GCRA,
				ratelimit.Limit{Name: "bench", Rate: 1 << 20, Period: time.Millisecond}, c.o)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Allow(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
