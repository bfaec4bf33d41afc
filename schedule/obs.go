package schedule

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurekit/tenure/internal/obs"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
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

// Store-call ops and outcomes (tenure.store.duration) of the scheduler's
// own store calls; its claims are timed by the lease Locker.
const (
	opNow = iota
	opBegin
	opFinish
	opMark
	opSlot
	opSlots
	opUnfinished
	opLast
	opRegister
	opDefinition
)

var (
	storeOps = []string{"schedule.now", "schedule.begin", "schedule.finish", "schedule.mark", "schedule.slot",
		"schedule.slots", "schedule.unfinished", "schedule.last", "schedule.register", "schedule.definition"}
	storeOutcomes = obs.NewOutcomes(obs.Refusal{Name: "not_found", Err: ErrNotFound}, obs.Refusal{Name: "final", Err: ErrFinal}, obs.Refusal{Name: "not_due", Err: ErrNotDue}, obs.Refusal{Name: "superseded", Err: ErrSuperseded})
)

// timedStore times every call the scheduler makes to its Store.
type timedStore struct {
	Store
	c *obs.Calls
}

func newTimedStore(s Store, t *telemetry) Store {
	if t == nil {
		return s
	}
	return timedStore{Store: s, c: obs.NewCalls(t.in, t.tr, obs.StoreName(s), storeOps, storeOutcomes.Names())}
}

func timed[T any](ts timedStore, ctx context.Context, op int, f func(context.Context) (T, error)) (T, error) {
	cctx, call := ts.c.Start(ctx, op)
	v, err := f(cctx)
	call.End(ctx, storeOutcomes.Of(err))
	return v, err
}

func (ts timedStore) Now(ctx context.Context) (time.Time, error) {
	return timed(ts, ctx, opNow, ts.Store.Now)
}

func (ts timedStore) Begin(ctx context.Context, req scheddriver.BeginRequest) (Record, error) {
	return timed(ts, ctx, opBegin, func(ctx context.Context) (Record, error) { return ts.Store.Begin(ctx, req) })
}

func (ts timedStore) Finish(ctx context.Context, req scheddriver.FinishRequest) (Record, error) {
	return timed(ts, ctx, opFinish, func(ctx context.Context) (Record, error) { return ts.Store.Finish(ctx, req) })
}

func (ts timedStore) Mark(ctx context.Context, req scheddriver.MarkRequest) (Record, bool, error) {
	var wrote bool
	r, err := timed(ts, ctx, opMark, func(ctx context.Context) (Record, error) {
		r, w, err := ts.Store.Mark(ctx, req)
		wrote = w
		return r, err
	})
	return r, wrote, err
}

func (ts timedStore) Slot(ctx context.Context, job, slotID string) (Record, error) {
	return timed(ts, ctx, opSlot, func(ctx context.Context) (Record, error) { return ts.Store.Slot(ctx, job, slotID) })
}

func (ts timedStore) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]Record, error) {
	return timed(ts, ctx, opSlots, func(ctx context.Context) ([]Record, error) { return ts.Store.Slots(ctx, job, from, to, limit) })
}

func (ts timedStore) Unfinished(ctx context.Context, job string, limit int) ([]Record, error) {
	return timed(ts, ctx, opUnfinished, func(ctx context.Context) ([]Record, error) { return ts.Store.Unfinished(ctx, job, limit) })
}

func (ts timedStore) Last(ctx context.Context, job string) (time.Time, bool, error) {
	var ok bool
	t, err := timed(ts, ctx, opLast, func(ctx context.Context) (time.Time, error) {
		t, o, err := ts.Store.Last(ctx, job)
		ok = o
		return t, err
	})
	return t, ok, err
}

func (ts timedStore) Register(ctx context.Context, req scheddriver.RegisterRequest) (Definition, error) {
	return timed(ts, ctx, opRegister, func(ctx context.Context) (Definition, error) { return ts.Store.Register(ctx, req) })
}

func (ts timedStore) Definition(ctx context.Context, job string) (Definition, error) {
	return timed(ts, ctx, opDefinition, func(ctx context.Context) (Definition, error) { return ts.Store.Definition(ctx, job) })
}
