package idempotency

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tenurekit/tenure/internal/obs"
)

// Request outcomes (tenure.idempotency.requests' outcome attribute).
const (
	outExecuted = iota
	outReplayed
	outMismatch
	outInProgress
	outUnknown
	outClaimLost
	outFailed // fn returned an error that released the claim
	outError  // invalid input or the store did not answer; fn did not run
)

var outcomeNames = [...]string{"executed", "replayed", "mismatch", "in_progress", "unknown", "claim_lost", "failed", "error"}

// telemetry is a Keeper's instrumentation; nil when it is off.
type telemetry struct {
	in    *obs.Instruments
	tr    *obs.Tracer
	calls *obs.Calls
	attrs []attribute.KeyValue // span attributes: store
	out   [len(outcomeNames)][]metric.AddOption
	keys  bool
}

func newTelemetry(s any, o *Options) *telemetry {
	if (obs.Config{MeterProvider: o.MeterProvider, TracerProvider: o.TracerProvider}).Off() {
		return nil
	}
	name := obs.StoreName(s)
	st := obs.KeyStore.String(name)
	t := &telemetry{in: obs.For(o.MeterProvider), tr: obs.NewTracer(o.TracerProvider),
		attrs: []attribute.KeyValue{st}, keys: o.TraceKeys}
	t.calls = obs.NewCalls(t.in, t.tr, name, storeOps, storeOutcomes.Names())
	for i, oc := range outcomeNames {
		t.out[i] = obs.Opts(st, obs.KeyOutcome.String(oc))
	}
	return t
}

func (t *telemetry) start(ctx context.Context, name string, req Request) (context.Context, obs.Span) {
	if t == nil {
		return ctx, obs.Span{}
	}
	ctx, sp := t.tr.Start(ctx, name, t.attrs)
	if t.keys && sp.Recording() {
		sp.SetAttributes(obs.KeyScope.String(req.Scope), obs.KeyKey.String(req.Key))
	}
	return ctx, sp
}

// done records a request's outcome and ends its span; ran says whether fn
// ran in this call.
func (t *telemetry) done(ctx context.Context, sp obs.Span, res Result, ran bool, err error) {
	if t == nil {
		return
	}
	oc := classify(res, ran, err)
	obs.Add(ctx, t.in.IdempotencyRequests, t.out[oc])
	sp.End(outcomeNames[oc], oc >= outUnknown && oc != outFailed)
}

func classify(res Result, ran bool, err error) int {
	var ue *UnknownError
	var fe *FinalError
	var ip *InProgressError
	switch {
	case ran && err == nil:
		return outExecuted
	case err == nil || res.Replayed:
		return outReplayed
	case errors.Is(err, ErrClaimLost):
		return outClaimLost
	case errors.As(err, &ue):
		return outUnknown
	case ran && errors.As(err, &fe) && Recorded(err):
		return outExecuted
	case ran:
		return outFailed
	case errors.Is(err, ErrMismatch):
		return outMismatch
	case errors.As(err, &ip):
		return outInProgress
	}
	return outError
}

// Store-call ops and outcomes (tenure.store.duration).
const (
	opBegin = iota
	opRenew
	opComplete
	opRelease
	opInspect
	opTxClaim
	opTxUndo
	opTxComplete
	opTxRelease
)

var (
	storeOps = []string{"idempotency.begin", "idempotency.renew", "idempotency.complete", "idempotency.release", "idempotency.inspect",
		"idempotency.tx_claim", "idempotency.tx_undo", "idempotency.tx_complete", "idempotency.tx_release"}
	storeOutcomes = obs.NewOutcomes(obs.Refusal{Name: "claim_lost", Err: ErrClaimLost})
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
	return timedStore{s: s, c: t.calls}
}

func (ts timedStore) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	cctx, call := ts.c.Start(ctx, opBegin)
	r, err := ts.s.Begin(cctx, b)
	call.End(ctx, storeOutcomes.Of(err))
	return r, err
}

func (ts timedStore) Renew(ctx context.Context, id ID, token string, fence uint64, ttl time.Duration) error {
	cctx, call := ts.c.Start(ctx, opRenew)
	err := ts.s.Renew(cctx, id, token, fence, ttl)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (ts timedStore) Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error {
	cctx, call := ts.c.Start(ctx, opComplete)
	err := ts.s.Complete(cctx, id, token, fence, out, retention)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (ts timedStore) Release(ctx context.Context, id ID, token string) error {
	cctx, call := ts.c.Start(ctx, opRelease)
	err := ts.s.Release(cctx, id, token)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (ts timedStore) Inspect(ctx context.Context, id ID) (Record, error) {
	cctx, call := ts.c.Start(ctx, opInspect)
	r, err := ts.s.Inspect(cctx, id)
	call.End(ctx, storeOutcomes.Of(err))
	return r, err
}

// timedTx times every call to a Tx (DoTx's calls in the caller's
// transaction).
type timedTx struct {
	tx Tx
	c  *obs.Calls
}

func newTimedTx(tx Tx, t *telemetry) Tx {
	if t == nil {
		return tx
	}
	return timedTx{tx: tx, c: t.calls}
}

func (tt timedTx) Claim(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	cctx, call := tt.c.Start(ctx, opTxClaim)
	r, err := tt.tx.Claim(cctx, b)
	call.End(ctx, storeOutcomes.Of(err))
	return r, err
}

func (tt timedTx) Undo(ctx context.Context) error {
	cctx, call := tt.c.Start(ctx, opTxUndo)
	err := tt.tx.Undo(cctx)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (tt timedTx) Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error {
	cctx, call := tt.c.Start(ctx, opTxComplete)
	err := tt.tx.Complete(cctx, id, token, fence, out, retention)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}

func (tt timedTx) Release(ctx context.Context, id ID, token string) error {
	cctx, call := tt.c.Start(ctx, opTxRelease)
	err := tt.tx.Release(cctx, id, token)
	call.End(ctx, storeOutcomes.Of(err))
	return err
}
