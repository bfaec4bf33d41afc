package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/serveapi"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/session"
)

// apiTelemetry records the instruments of tenure's metrics contract
// (docs/observability.md) for API operations: the primitives' counters,
// as the Go components record them for their own calls, and
// tenure.store.duration per operation's store call. No attribute holds a
// key, a scope, a token or a user; limit names are bounded
// (maxLimitNames, then "other").
type apiTelemetry struct {
	in *obs.Instruments
	// ops are the operations that call the store, by operation ID.
	ops map[string]*apiOp
	// acquires: granted, held, error; lost: a renewal refused.
	acquires [3][]metric.AddOption
	lost     []metric.AddOption
	// idem: by idempotency outcome name.
	idem map[string][]metric.AddOption
	// sessions: by session op, then outcome index in sessionOutcomes.
	sessions map[string][][]metric.AddOption

	limitMu    sync.Mutex
	limitStore string
	limits     map[string]*[3][]metric.AddOption // allowed, denied, error
}

// maxLimitNames bounds the limit attribute's values: limit names come
// from clients, so the names after that many distinct ones are recorded
// as "other".
const maxLimitNames = 64

// apiOp is one operation's store-call timing: the contract's op name and
// its outcomes.
type apiOp struct {
	outcomes obs.Outcomes
	opts     [][]metric.RecordOption // per outcome index
}

// The refusals of each store view, as the Go components name them.
var (
	leaseOutcomes   = obs.NewOutcomes(obs.Refusal{Name: "held", Err: leasedriver.ErrHeld}, obs.Refusal{Name: "not_held", Err: leasedriver.ErrNotHeld})
	fencedOutcomes  = obs.NewOutcomes(obs.Refusal{Name: "stale", Err: fence.ErrStale}, obs.Refusal{Name: "not_held", Err: leasedriver.ErrNotHeld})
	idemOutcomes    = obs.NewOutcomes(obs.Refusal{Name: "claim_lost", Err: idempotency.ErrClaimLost}, obs.Refusal{Name: "mismatch", Err: idempotency.ErrMismatch}, obs.Refusal{Name: "in_progress", Err: idempotency.ErrInProgress})
	rateOutcomes    = obs.NewOutcomes(obs.Refusal{Name: "permit_lost", Err: ratelimit.ErrPermitLost})
	sessionOutcomes = obs.NewOutcomes(obs.Refusal{Name: "not_found", Err: session.ErrNotFound}, obs.Refusal{Name: "conflict", Err: session.ErrConflict})
	plainOutcomes   = obs.NewOutcomes()
)

// apiStoreOps names each store-calling operation's op (tenure.store.duration)
// and its outcomes; view picks the store it calls.
var apiStoreOps = map[string]struct {
	op       string
	outcomes obs.Outcomes
	view     func(st *Stores) any
}{
	"acquireLease":    {"lease.acquire", leaseOutcomes, leasesOf},
	"renewLease":      {"lease.renew", leaseOutcomes, leasesOf},
	"releaseLease":    {"lease.release", leaseOutcomes, leasesOf},
	"leaveLeaseQueue": {"lease.leave", leaseOutcomes, leasesOf},
	"inspectLease":    {"lease.inspect", leaseOutcomes, leasesOf},
	"listLeases":      {"lease.list", leaseOutcomes, leasesOf},

	"fencedWrite":       {"fenced.write", fencedOutcomes, leasesOf},
	"fencedHolderWrite": {"fenced.holder_write", fencedOutcomes, leasesOf},
	"fencedRead":        {"fenced.read", fencedOutcomes, leasesOf},

	"beginIdempotency":    {"idempotency.begin", idemOutcomes, idemOf},
	"renewIdempotency":    {"idempotency.renew", idemOutcomes, idemOf},
	"completeIdempotency": {"idempotency.complete", idemOutcomes, idemOf},
	"releaseIdempotency":  {"idempotency.release", idemOutcomes, idemOf},
	"inspectIdempotency":  {"idempotency.inspect", idemOutcomes, idemOf},

	"allowRate":     {"ratelimit.decide", rateOutcomes, limitsOf},
	"resetRate":     {"ratelimit.reset", rateOutcomes, limitsOf},
	"acquirePermit": {"ratelimit.acquire_permit", rateOutcomes, limitsOf},
	"renewPermit":   {"ratelimit.renew_permit", rateOutcomes, limitsOf},
	"releasePermit": {"ratelimit.release_permit", rateOutcomes, limitsOf},

	"slotHistory": {"schedule.slots", plainOutcomes, schedulesOf},

	"createSession":      {"session.create", sessionOutcomes, sessionsOf},
	"loadSession":        {"session.load", sessionOutcomes, sessionsOf},
	"touchSession":       {"session.touch", sessionOutcomes, sessionsOf},
	"saveSession":        {"session.save", sessionOutcomes, sessionsOf},
	"rotateSession":      {"session.rotate", sessionOutcomes, sessionsOf},
	"revokeSession":      {"session.revoke", sessionOutcomes, sessionsOf},
	"listSessions":       {"session.list", sessionOutcomes, sessionsOf},
	"revokeUserSessions": {"session.revoke_user", sessionOutcomes, sessionsOf},
	"writeSessionValue":  {"session.write_value", sessionOutcomes, sessionsOf},
	"readSessionValue":   {"session.read_value", sessionOutcomes, sessionsOf},
}

// The contract's session op of each session operation (tenure.session.operations).
var sessionMetricOps = map[string]string{
	"createSession": "create", "loadSession": "load", "touchSession": "touch", "saveSession": "save",
	"rotateSession": "rotate", "revokeSession": "revoke", "revokeUserSessions": "revoke_user", "listSessions": "list",
}

func leasesOf(st *Stores) any    { return st.Leases }
func idemOf(st *Stores) any      { return st.Idempotency }
func limitsOf(st *Stores) any    { return st.Limits }
func schedulesOf(st *Stores) any { return st.Schedules }
func sessionsOf(st *Stores) any  { return st.Sessions }

// newAPITelemetry builds the attribute sets once; nil when mp is the
// no-op provider.
func newAPITelemetry(mp metric.MeterProvider, st *Stores) *apiTelemetry {
	if _, off := mp.(metricnoop.MeterProvider); off {
		return nil
	}
	t := &apiTelemetry{in: obs.For(mp), ops: map[string]*apiOp{}, idem: map[string][]metric.AddOption{},
		sessions: map[string][][]metric.AddOption{}, limits: map[string]*[3][]metric.AddOption{}}
	for id, d := range apiStoreOps {
		v := d.view(st)
		if v == nil {
			continue
		}
		name := obs.StoreName(v)
		o := &apiOp{outcomes: d.outcomes}
		for _, oc := range d.outcomes.Names() {
			o.opts = append(o.opts, obs.RecordOpts(obs.KeyStore.String(name), obs.KeyOp.String(d.op), obs.KeyOutcome.String(oc)))
		}
		t.ops[id] = o
	}
	if st.Leases != nil {
		name := obs.KeyStore.String(obs.StoreName(st.Leases))
		for i, oc := range [...]string{"granted", "held", "error"} {
			t.acquires[i] = obs.Opts(name, obs.KeyOutcome.String(oc))
		}
		t.lost = obs.Opts(name)
	}
	if st.Idempotency != nil {
		name := obs.KeyStore.String(obs.StoreName(st.Idempotency))
		for _, oc := range []string{"executed", "replayed", "mismatch", "in_progress", "unknown", "claim_lost", "failed", "error"} {
			t.idem[oc] = obs.Opts(name, obs.KeyOutcome.String(oc))
		}
	}
	if st.Sessions != nil {
		name := obs.KeyStore.String(obs.StoreName(st.Sessions))
		for _, op := range sessionMetricOps {
			var row [][]metric.AddOption
			for _, oc := range sessionOutcomes.Names() {
				row = append(row, obs.Opts(name, obs.KeyOp.String(op), obs.KeyOutcome.String(oc)))
			}
			t.sessions[op] = row
		}
	}
	if st.Limits != nil {
		t.limitStore = obs.StoreName(st.Limits)
	}
	return t
}

// timed reports whether operation id's store call is timed as one call:
// a waiting acquire's time is its wait, not a store call.
func timed(id string, in any) bool {
	if a, ok := in.(*serveapi.AcquireLease); ok && a.Wait > 0 {
		return false
	}
	return true
}

// record records operation id's outcome: in is a pointer to its decoded
// input, out its answer, err its error, start when its handler began.
func (t *apiTelemetry) record(ctx context.Context, id string, in, out any, err error, start time.Time) {
	if o := t.ops[id]; o != nil && timed(id, in) && t.in.StoreDuration.Enabled(ctx) {
		t.in.StoreDuration.Record(ctx, time.Since(start).Seconds(), o.opts[o.outcomes.Of(err)]...)
	}
	switch id {
	case "acquireLease":
		if t.acquires[0] == nil {
			return
		}
		i := 0
		switch {
		case errors.Is(err, leasedriver.ErrHeld):
			i = 1
		case err != nil:
			i = 2
		}
		obs.Add(ctx, t.in.LeaseAcquires, t.acquires[i])
	case "renewLease":
		if t.lost != nil && errors.Is(err, leasedriver.ErrNotHeld) {
			obs.Add(ctx, t.in.LeaseLost, t.lost)
		}
	case "beginIdempotency", "completeIdempotency", "releaseIdempotency":
		t.idempotency(ctx, id, out, err)
	case "allowRate":
		a, _ := in.(*serveapi.RateAllow)
		if a == nil || a.Peek {
			return // a peek is not a decision
		}
		d, _ := out.(serveapi.RateDecisions)
		dec := 0
		switch {
		case err != nil:
			dec = 2
		case !d.Allowed:
			dec = 1
		}
		for _, rq := range a.Requests {
			obs.Add(ctx, t.in.RatelimitDecisions, t.limitOpts(rq.TheLimit().Name)[dec])
		}
	case "acquirePermit":
		p, _ := in.(*serveapi.Permit)
		g, _ := out.(serveapi.PermitGrant)
		if p == nil {
			return
		}
		dec := 0
		switch {
		case err != nil:
			dec = 2
		case !g.Acquired:
			dec = 1
		}
		obs.Add(ctx, t.in.RatelimitDecisions, t.limitOpts(p.Name)[dec])
	default:
		if op, ok := sessionMetricOps[id]; ok {
			if row := t.sessions[op]; row != nil {
				obs.Add(ctx, t.in.SessionOperations, row[sessionOutcomes.Of(err)])
			}
		}
	}
}

// idempotency counts the protocol's steps as the Keeper counts a request:
// a begin that replays, refuses or finds the claim abandoned; a complete
// (executed, or the claim lost); a release (the caller's work failed).
func (t *apiTelemetry) idempotency(ctx context.Context, id string, out any, err error) {
	if len(t.idem) == 0 {
		return
	}
	oc := ""
	switch {
	case errors.Is(err, idempotency.ErrMismatch):
		oc = "mismatch"
	case errors.Is(err, idempotency.ErrInProgress):
		oc = "in_progress"
	case errors.Is(err, idempotency.ErrClaimLost):
		oc = "claim_lost"
	case err != nil:
		oc = "error"
	case id == "beginIdempotency":
		b, _ := out.(serveapi.IdemBegun)
		switch b.State {
		case "completed":
			oc = "replayed"
		case "abandoned":
			oc = "unknown"
		}
	case id == "completeIdempotency":
		oc = "executed"
	case id == "releaseIdempotency":
		oc = "failed"
	}
	if oc != "" {
		obs.Add(ctx, t.in.IdempotencyRequests, t.idem[oc])
	}
}

// limitOpts returns the decision attribute sets of limit name.
func (t *apiTelemetry) limitOpts(name string) *[3][]metric.AddOption {
	t.limitMu.Lock()
	defer t.limitMu.Unlock()
	if o := t.limits[name]; o != nil {
		return o
	}
	if len(t.limits) >= maxLimitNames {
		name = "other"
		if o := t.limits[name]; o != nil {
			return o
		}
	}
	o := new([3][]metric.AddOption)
	for i, d := range [...]string{"allowed", "denied", "error"} {
		o[i] = obs.Opts(obs.KeyStore.String(t.limitStore), obs.KeyLimit.String(name), obs.KeyDecision.String(d))
	}
	t.limits[name] = o
	return o
}
