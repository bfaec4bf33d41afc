package schedule

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurekit/tenure/internal/obs"
)

// Slot states counted in tenure.schedule.slots.
const (
	slotDone = iota
	slotFailed
	slotRetried
	slotMissed
	slotSkipped
)

var slotStates = [...]string{"done", "failed", "retried", "missed", "skipped"}

// telemetry is a Scheduler's instrumentation; nil when it is off.
type telemetry struct {
	in    *obs.Instruments
	tr    *obs.Tracer
	store attribute.KeyValue

	mu   sync.Mutex
	jobs map[string]*jobTelemetry
}

// jobTelemetry holds one job's precomputed attribute sets.
type jobTelemetry struct {
	attrs []attribute.KeyValue // span attributes: store, job
	slots [len(slotStates)][]metric.AddOption
}

func newTelemetry(store Store, mp metric.MeterProvider, tp trace.TracerProvider) *telemetry {
	if (obs.Config{MeterProvider: mp, TracerProvider: tp}).Off() {
		return nil
	}
	return &telemetry{in: obs.For(mp), tr: obs.NewTracer(tp), store: obs.KeyStore.String(obs.StoreName(store)),
		jobs: map[string]*jobTelemetry{}}
}

func (t *telemetry) job(name string) *jobTelemetry {
	t.mu.Lock()
	defer t.mu.Unlock()
	jt := t.jobs[name]
	if jt == nil {
		jt = &jobTelemetry{attrs: []attribute.KeyValue{t.store, obs.KeyJob.String(name)}}
		for i, st := range slotStates {
			jt.slots[i] = obs.Opts(t.store, obs.KeyJob.String(name), obs.KeyState.String(st))
		}
		t.jobs[name] = jt
	}
	return jt
}

// slot counts one slot of job reaching state.
func (t *telemetry) slot(ctx context.Context, job string, state int) {
	if t != nil && t.in.ScheduleSlots.Enabled(ctx) {
		t.in.ScheduleSlots.Add(ctx, 1, t.job(job).slots[state]...)
	}
}

// start begins the span of one attempt at a slot of job.
func (t *telemetry) start(ctx context.Context, job string) (context.Context, obs.Span) {
	if t == nil {
		return ctx, obs.Span{}
	}
	return t.tr.Start(ctx, "tenure.schedule.slot", t.job(job).attrs)
}
