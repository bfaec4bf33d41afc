package obs

import (
	"errors"

	"context"
	"github.com/tenurekit/tenure"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Calls times one component's calls to its store: tenure.store.duration
// with store, op and outcome, and a client span per call under a recording
// parent. Every attribute set is built once, here.
type Calls struct {
	hist     metric.Float64Histogram
	tracer   *Tracer
	outcomes []string
	spans    []string                  // span name per op
	attrs    [][]attribute.KeyValue    // span attributes per op
	opts     [][][]metric.RecordOption // per op, per outcome
}

// NewCalls returns the timer of a component whose store (named store, see
// StoreName) has the given ops ("lease.acquire", ...). outcomes[0] must be
// OutcomeOK; End takes an index into outcomes.
func NewCalls(in *Instruments, tr *Tracer, store string, ops, outcomes []string) *Calls {
	c := &Calls{hist: in.StoreDuration, tracer: tr, outcomes: outcomes}
	for _, op := range ops {
		c.spans = append(c.spans, "tenure.store."+op)
		c.attrs = append(c.attrs, []attribute.KeyValue{KeyStore.String(store), KeyOp.String(op)})
		row := make([][]metric.RecordOption, len(outcomes))
		for i, oc := range outcomes {
			row[i] = RecordOpts(KeyStore.String(store), KeyOp.String(op), KeyOutcome.String(oc))
		}
		c.opts = append(c.opts, row)
	}
	return c
}

// Call is one store call in progress.
type Call struct {
	c     *Calls
	op    int
	timed bool
	start time.Time
	span  Span
}

// Start begins store call op (an index into NewCalls' ops). The returned
// context carries the call's span, if any.
func (c *Calls) Start(ctx context.Context, op int) (context.Context, Call) {
	call := Call{c: c, op: op, timed: c.hist.Enabled(ctx)}
	ctx, call.span = c.tracer.StartChild(ctx, c.spans[op], c.attrs[op])
	if call.timed {
		call.start = time.Now()
	}
	return ctx, call
}

// End records the call with outcome (an index into NewCalls' outcomes).
func (call Call) End(ctx context.Context, outcome int) {
	if call.timed {
		call.c.hist.Record(ctx, time.Since(call.start).Seconds(), call.c.opts[call.op][outcome]...)
	}
	call.span.End(call.c.outcomes[outcome], outcome != 0)
}

type guardKey struct{ store, guard string }

var guardOpts sync.Map // guardKey -> []metric.AddOption

// Guard names for GuardRefused.
const (
	// GuardAdmit is a max-fence guard (Admit, AdmitAtLeast, a fenced write).
	GuardAdmit = "admit"
	// GuardCheckHolder is the strict current-holder check.
	GuardCheckHolder = "check_holder"
	// GuardFencedSet is a fenced write of a value (FencedSet, FencedPut).
	GuardFencedSet = "fenced_set"
)

// GuardRefused counts one write a resource-side guard refused
// (tenure.guard.refusals with store and guard) on the global
// MeterProvider. Stores call it where a guard answers fence.ErrStale or
// lease.ErrNotHeld; store is the store's name ("pgstore"), guard one of
// the Guard constants.
func GuardRefused(ctx context.Context, store, guard string) {
	GuardRefusedOn(ctx, nil, store, guard)
}

// GuardRefusedOn is GuardRefused on the instruments of mp (nil: global).
func GuardRefusedOn(ctx context.Context, mp metric.MeterProvider, store, guard string) {
	c := For(mp).GuardRefusals
	if !c.Enabled(ctx) {
		return
	}
	k := guardKey{store, guard}
	v, ok := guardOpts.Load(k)
	if !ok {
		v, _ = guardOpts.LoadOrStore(k, Opts(KeyStore.String(store), KeyGuard.String(guard)))
	}
	c.Add(ctx, 1, v.([]metric.AddOption)...)
}

// Refusal is one of a component's own store-call outcomes: its name in
// the outcome attribute, and the sentinel an error matches to get it.
type Refusal struct {
	Name string
	Err  error
}

// Outcomes are the values of a component's store-call outcome attribute:
// OutcomeOK, the component's refusals in order, then OutcomeInvalid,
// OutcomeUnavailable and OutcomeError. Invalid and unavailable are told
// by the error kinds every primitive's sentinels share
// (tenure.ErrInvalid, tenure.ErrUnavailable), so one rule serves every
// component.
type Outcomes struct {
	names    []string
	refusals []Refusal
}

// NewOutcomes returns the outcomes of a component with the given refusals.
func NewOutcomes(refusals ...Refusal) Outcomes {
	names := []string{OutcomeOK}
	for _, r := range refusals {
		names = append(names, r.Name)
	}
	return Outcomes{names: append(names, OutcomeInvalid, OutcomeUnavailable, OutcomeError), refusals: refusals}
}

// Names lists the outcomes, for NewCalls and a component's own counters.
func (o Outcomes) Names() []string { return o.names }

// Of returns the index in Names of err's outcome: 0 for nil, the first
// refusal err matches, else invalid, unavailable or error.
func (o Outcomes) Of(err error) int {
	if err == nil {
		return 0
	}
	for i, r := range o.refusals {
		if errors.Is(err, r.Err) {
			return i + 1
		}
	}
	n := len(o.refusals)
	switch {
	case errors.Is(err, tenure.ErrInvalid):
		return n + 1
	case errors.Is(err, tenure.ErrUnavailable):
		return n + 2
	}
	return n + 3
}
