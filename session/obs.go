package session

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tenurekit/tenure/internal/obs"
)

// Operations (tenure.session.operations' and tenure.store.duration's op
// attribute; the store duration's carries the "session." prefix).
const (
	opCreate = iota
	opLoad
	opTouch
	opSave
	opRotate
	opRevoke
	opRevokeUser
	opList
)

var (
	opNames  = []string{"create", "load", "touch", "save", "rotate", "revoke", "revoke_user", "list"}
	outcomes = obs.NewOutcomes(obs.Refusal{Name: "not_found", Err: ErrNotFound}, obs.Refusal{Name: "conflict", Err: ErrConflict})
)

// timedStore counts and times every call to a Store: each Manager
// operation is one store call.
type timedStore struct {
	s     Store
	in    *obs.Instruments
	calls *obs.Calls
	ops   [][][]metric.AddOption // per op, per outcome
}

// instrument returns s counted and timed on the providers of o, or s itself
// when both are the OpenTelemetry no-op providers.
func instrument(s Store, o *Options) Store {
	if (obs.Config{MeterProvider: o.MeterProvider, TracerProvider: o.TracerProvider}).Off() {
		return s
	}
	name := obs.StoreName(s)
	in := obs.For(o.MeterProvider)
	storeOps := make([]string, len(opNames))
	ts := &timedStore{s: s, in: in}
	for i, op := range opNames {
		storeOps[i] = "session." + op
		row := make([][]metric.AddOption, len(outcomes.Names()))
		for j, oc := range outcomes.Names() {
			row[j] = obs.Opts(obs.KeyStore.String(name), obs.KeyOp.String(op), obs.KeyOutcome.String(oc))
		}
		ts.ops = append(ts.ops, row)
	}
	ts.calls = obs.NewCalls(in, obs.NewTracer(o.TracerProvider), name, storeOps, outcomes.Names())
	return ts
}

func (ts *timedStore) start(ctx context.Context, op int) (context.Context, obs.Call) {
	return ts.calls.Start(ctx, op)
}

func (ts *timedStore) end(ctx context.Context, call obs.Call, op int, err error) {
	oc := outcomes.Of(err)
	call.End(ctx, oc)
	obs.Add(ctx, ts.in.SessionOperations, ts.ops[op][oc])
}

func (ts *timedStore) Create(ctx context.Context, rec Record, idle, absolute time.Duration) (Record, error) {
	cctx, call := ts.start(ctx, opCreate)
	r, err := ts.s.Create(cctx, rec, idle, absolute)
	ts.end(ctx, call, opCreate, err)
	return r, err
}

func (ts *timedStore) Load(ctx context.Context, id ID, idle time.Duration) (Record, error) {
	cctx, call := ts.start(ctx, opLoad)
	r, err := ts.s.Load(cctx, id, idle)
	ts.end(ctx, call, opLoad, err)
	return r, err
}

func (ts *timedStore) Touch(ctx context.Context, id ID, version uint64, idle time.Duration) (time.Time, error) {
	cctx, call := ts.start(ctx, opTouch)
	t, err := ts.s.Touch(cctx, id, version, idle)
	ts.end(ctx, call, opTouch, err)
	return t, err
}

func (ts *timedStore) Save(ctx context.Context, id ID, version uint64, data []byte, idle time.Duration) (Record, error) {
	cctx, call := ts.start(ctx, opSave)
	r, err := ts.s.Save(cctx, id, version, data, idle)
	ts.end(ctx, call, opSave, err)
	return r, err
}

func (ts *timedStore) Rotate(ctx context.Context, old, newID ID, version uint64, data []byte, idle time.Duration) (Record, error) {
	cctx, call := ts.start(ctx, opRotate)
	r, err := ts.s.Rotate(cctx, old, newID, version, data, idle)
	ts.end(ctx, call, opRotate, err)
	return r, err
}

func (ts *timedStore) Delete(ctx context.Context, id ID) error {
	cctx, call := ts.start(ctx, opRevoke)
	err := ts.s.Delete(cctx, id)
	ts.end(ctx, call, opRevoke, err)
	return err
}

func (ts *timedStore) DeleteUser(ctx context.Context, userID string) (int, error) {
	cctx, call := ts.start(ctx, opRevokeUser)
	n, err := ts.s.DeleteUser(cctx, userID)
	ts.end(ctx, call, opRevokeUser, err)
	return n, err
}

func (ts *timedStore) List(ctx context.Context, userID string) ([]Record, error) {
	cctx, call := ts.start(ctx, opList)
	rs, err := ts.s.List(cctx, userID)
	ts.end(ctx, call, opList, err)
	return rs, err
}
