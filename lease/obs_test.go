package lease_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/lease"
)

func TestTelemetryCountsAcquiresAndStoreCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := obstest.New()
		lk, err := lease.New(newMem(t, nil).Leases(), &lease.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		l, err := lk.TryAcquire(ctx, "orders", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.TryAcquire(ctx, "orders", time.Second); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("second TryAcquire: %v, want ErrHeld", err)
		}
		if _, err := lk.TryAcquire(ctx, "", time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("empty key: %v, want ErrInvalid", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for oc, want := range map[string]int64{"granted": 1, "held": 1, "error": 1} {
			if got := tl.Count(t, "tenure.lease.acquires", map[string]string{"store": "memstore", "outcome": oc}); got != want {
				t.Errorf("tenure.lease.acquires{outcome=%s} = %d, want %d", oc, got, want)
			}
		}
		for _, c := range []struct {
			op, outcome string
			want        uint64
		}{{"lease.acquire", "ok", 1}, {"lease.acquire", "held", 1}, {"lease.release", "ok", 1}} {
			if got := tl.Observations(t, "tenure.store.duration", map[string]string{"store": "memstore", "op": c.op, "outcome": c.outcome}); got != c.want {
				t.Errorf("tenure.store.duration{op=%s,outcome=%s} has %d values, want %d", c.op, c.outcome, got, c.want)
			}
		}
		if got := tl.Count(t, "tenure.lease.lost", nil); got != 0 {
			t.Errorf("tenure.lease.lost = %d after a release, want 0", got)
		}
	})
}

func TestTelemetryCountsAndLogsLostLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := obstest.New()
		var logs bytes.Buffer
		lk, err := lease.New(newMem(t, nil).Leases(), &lease.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		l, err := lk.TryAcquire(context.Background(), "orders", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done()      // never renewed: validity runs out
		synctest.Wait() // the warning is logged after Done closes
		if !errors.Is(l.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrLost", l.Err())
		}
		if got := tl.Count(t, "tenure.lease.lost", map[string]string{"store": "memstore"}); got != 1 {
			t.Errorf("tenure.lease.lost = %d, want 1", got)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "lease: lost") {
			t.Errorf("no warning for the lost lease: %q", logs.String())
		}
		if strings.Contains(logs.String(), l.Token().Reveal()) {
			t.Error("the token was logged")
		}
		_ = l.Release(context.Background()) // already lost: not counted again
		if got := tl.Count(t, "tenure.lease.lost", nil); got != 1 {
			t.Errorf("tenure.lease.lost = %d after release, want 1", got)
		}
	})
}

func TestTelemetrySpansWithoutKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, keys := range []bool{false, true} {
			tl := obstest.New()
			lk, err := lease.New(newMem(t, nil).Leases(), &lease.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer, TraceKeys: keys})
			if err != nil {
				t.Fatal(err)
			}
			var token string
			err = lk.Do(context.Background(), "secret-key-name", time.Second, func(ctx context.Context, l *lease.Lease) error {
				token = l.Token().Reveal()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			names := tl.SpanNames()
			for _, want := range []string{"tenure.lease.do", "tenure.lease.acquire", "tenure.store.lease.acquire", "tenure.store.lease.release"} {
				if !slices.Contains(names, want) {
					t.Errorf("keys=%v: no span %q in %q", keys, want, names)
				}
			}
			values := tl.AttributeValues(t)
			if slices.Contains(values, token) {
				t.Errorf("keys=%v: the token is an attribute value", keys)
			}
			if got := slices.Contains(values, "secret-key-name"); got != keys {
				t.Errorf("keys=%v: key among attribute values = %v", keys, got)
			}
			// The store span is a child of the acquire span, itself a child of Do's.
			byName := map[string]string{}
			for _, s := range tl.Spans() {
				byName[s.Name()] = s.SpanContext().SpanID().String()
			}
			for _, s := range tl.Spans() {
				if s.Name() == "tenure.store.lease.acquire" && s.Parent().SpanID().String() != byName["tenure.lease.acquire"] {
					t.Errorf("store span's parent is not the acquire span")
				}
			}
		}
	})
}

func TestTelemetryOffWithNoopProviders(t *testing.T) {
	s := newMem(t, nil).Leases()
	lk, err := lease.New(s, &lease.Options{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	if lk.Store() != s {
		t.Error("Store() is not the store given")
	}
	l, err := lk.TryAcquire(context.Background(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLeaseCycle measures TryAcquire and Release on memstore with
// instrumentation off (no-op providers), with the global providers and no
// SDK installed (the default for a service without OpenTelemetry), and
// with the SDK collecting metrics (and spans).
func BenchmarkLeaseCycle(b *testing.B) {
	tl := obstest.New()
	for _, c := range []struct {
		name string
		o    *lease.Options
	}{
		{"off", &lease.Options{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}},
		{"global-noop", nil},
		{"sdk-metrics-only", &lease.Options{MeterProvider: tl.Meter, TracerProvider: tracenoop.NewTracerProvider()}},
		{"sdk", &lease.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer}},
	} {
		b.Run(c.name, func(b *testing.B) {
			lk, err := lease.New(newMem(b, nil).Leases(), c.o)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := lk.TryAcquire(ctx, "k", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
