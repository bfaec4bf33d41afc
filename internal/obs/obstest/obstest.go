// Package obstest collects tenure's metrics and spans in tests, with the
// OpenTelemetry SDK's manual reader and span recorder.
package obstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Telemetry is a MeterProvider and a TracerProvider that keep what they
// get for inspection.
type Telemetry struct {
	Meter  *sdkmetric.MeterProvider
	Tracer *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

// New returns a fresh Telemetry.
func New() *Telemetry {
	r := sdkmetric.NewManualReader()
	sr := tracetest.NewSpanRecorder()
	return &Telemetry{
		Meter:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)),
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		reader: r,
		spans:  sr,
	}
}

func (tl *Telemetry) collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tl.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.String() != v {
			return false
		}
	}
	return true
}

// Count returns the sum of counter name over the points whose attributes
// include want.
func (tl *Telemetry) Count(t testing.TB, name string, want map[string]string) int64 {
	t.Helper()
	var n int64
	for _, m := range tl.collect(t) {
		if m.Name != name {
			continue
		}
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is %T, not an int64 counter", name, m.Data)
		}
		for _, p := range sum.DataPoints {
			if matches(p.Attributes, want) {
				n += p.Value
			}
		}
	}
	return n
}

// Observations returns how many values histogram name recorded over the
// points whose attributes include want.
func (tl *Telemetry) Observations(t testing.TB, name string, want map[string]string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range tl.collect(t) {
		if m.Name != name {
			continue
		}
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("%s is %T, not a float64 histogram", name, m.Data)
		}
		for _, p := range h.DataPoints {
			if matches(p.Attributes, want) {
				n += p.Count
			}
		}
	}
	return n
}

// AttributeSets returns every attribute set recorded on any metric, for
// checks that no key or token became an attribute value.
func (tl *Telemetry) AttributeSets(t testing.TB) map[string][]attribute.Set {
	t.Helper()
	out := map[string][]attribute.Set{}
	for _, m := range tl.collect(t) {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				out[m.Name] = append(out[m.Name], p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				out[m.Name] = append(out[m.Name], p.Attributes)
			}
		}
	}
	return out
}

// Spans returns the ended spans.
func (tl *Telemetry) Spans() []sdktrace.ReadOnlySpan { return tl.spans.Ended() }

// SpanNames returns the names of the ended spans, in the order they ended.
func (tl *Telemetry) SpanNames() []string {
	var out []string
	for _, s := range tl.spans.Ended() {
		out = append(out, s.Name())
	}
	return out
}

// AttributeValues returns every attribute value of every recorded metric
// point and ended span, as text.
func (tl *Telemetry) AttributeValues(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, sets := range tl.AttributeSets(t) {
		for _, s := range sets {
			for _, kv := range s.ToSlice() {
				out = append(out, kv.Value.String())
			}
		}
	}
	for _, s := range tl.spans.Ended() {
		for _, kv := range s.Attributes() {
			out = append(out, kv.Value.String())
		}
		out = append(out, s.Status().Description)
	}
	return out
}
