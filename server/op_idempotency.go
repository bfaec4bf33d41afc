package server

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
)

// idempotencyOps are the operations on idempotency records:
// idempotency.Store's calls.
var idempotencyOps = []operation{
	&op[serveapi.IdemBegin, serveapi.IdemBegun]{Method: "POST", Path: "/v1/idempotency/begin", ID: "beginIdempotency",
		Needs: idemView, Scope: "scope", Handle: beginIdempotency,
		Doc: "Claim an idempotency record for token, or answer from the live record (claimed, completed, in-progress, abandoned, mismatch).",
		Example: serveapi.IdemBegin{Scope: "billing/charge", Key: "order-1234", Fingerprint: "sha256-5d36fce2", Token: "claim-7c1e9a",
			ClaimTTL: serveapi.Duration(30 * time.Second), Retention: serveapi.Duration(24 * time.Hour)}},
	&op[serveapi.IdemClaim, noBody]{Method: "POST", Path: "/v1/idempotency/renew", ID: "renewIdempotency",
		Needs: idemView, Scope: "scope", Required: []string{"fence", "ttl"}, Problems: []string{"lost"},
		Doc:     "Extend a claim held by token and fence.",
		Example: serveapi.IdemClaim{Scope: "billing/charge", Key: "order-1234", Token: "claim-7c1e9a", Fence: 1796137794183175, TTL: serveapi.Duration(30 * time.Second)},
		Handle: func(ctx context.Context, r *request, in serveapi.IdemClaim) (noBody, error) {
			return noBody{}, r.s.st.Idempotency.Renew(ctx, idemID(in), in.Token, in.Fence, in.TTL.D())
		}},
	&op[serveapi.IdemClaim, noBody]{Method: "POST", Path: "/v1/idempotency/complete", ID: "completeIdempotency",
		Needs: idemView, Scope: "scope", Required: []string{"fence", "outcome", "retention"}, Problems: []string{"lost"}, Handle: completeIdempotency,
		Doc: "Record the outcome of the claim held by token and fence.",
		Example: serveapi.IdemClaim{Scope: "billing/charge", Key: "order-1234", Token: "claim-7c1e9a", Fence: 1796137794183175,
			Outcome: &serveapi.IdemOutcome{Value: []byte(`{"charged":1200}`)}, Retention: serveapi.Duration(24 * time.Hour)}},
	&op[serveapi.IdemClaim, noBody]{Method: "POST", Path: "/v1/idempotency/release", ID: "releaseIdempotency",
		Needs: idemView, Scope: "scope", Problems: []string{"lost"},
		Doc:     "Drop the claim held by token (the next begin claims anew).",
		Example: serveapi.IdemClaim{Scope: "billing/charge", Key: "order-1234", Token: "claim-7c1e9a"},
		Handle: func(ctx context.Context, r *request, in serveapi.IdemClaim) (noBody, error) {
			return noBody{}, r.s.st.Idempotency.Release(ctx, idemID(in), in.Token)
		}},
	&op[inspectIdemQuery, serveapi.IdemRecord]{Method: "GET", Path: "/v1/idempotency/inspect", ID: "inspectIdempotency",
		Needs: idemView, Scope: "scope", Handle: inspectIdempotency,
		Doc:     "An idempotency record, unchanged.",
		Example: inspectIdemQuery{Scope: "billing/charge", Key: "order-1234"}},
}

// inspectIdemQuery is the query of inspectIdempotency.
type inspectIdemQuery struct {
	Scope string `query:"scope" doc:"the record's scope"`
	Key   string `query:"key" doc:"the client's idempotency key"`
}

func idemID(in serveapi.IdemClaim) idempotency.ID {
	return idempotency.ID{Scope: in.Scope, Key: in.Key}
}

func outcomeOut(o idempotency.Outcome) *serveapi.IdemOutcome {
	return &serveapi.IdemOutcome{Value: o.Value, Failed: o.Failed, Message: o.Message}
}

func beginIdempotency(ctx context.Context, r *request, in serveapi.IdemBegin) (serveapi.IdemBegun, error) {
	b, err := r.s.st.Idempotency.Begin(ctx, idemdriver.Begin{
		ID: idempotency.ID{Scope: in.Scope, Key: in.Key}, Fingerprint: in.Fingerprint,
		Token: secret.New(in.Token), ClaimTTL: in.ClaimTTL.D(), Retention: in.Retention.D(), Takeover: in.Takeover,
	})
	if err != nil {
		return serveapi.IdemBegun{}, err
	}
	out := serveapi.IdemBegun{State: b.State.String(), Fence: b.Fence, TTL: serveapi.Duration(b.TTL)}
	if b.State == idemdriver.Completed {
		out.Outcome = outcomeOut(b.Outcome)
	}
	return out, nil
}

func completeIdempotency(ctx context.Context, r *request, in serveapi.IdemClaim) (noBody, error) {
	if in.Outcome == nil {
		return noBody{}, invalidf("outcome is required")
	}
	out := idempotency.Outcome{Value: in.Outcome.Value, Failed: in.Outcome.Failed, Message: in.Outcome.Message}
	return noBody{}, r.s.st.Idempotency.Complete(ctx, idemID(in), in.Token, in.Fence, out, in.Retention.D())
}

func inspectIdempotency(ctx context.Context, r *request, in inspectIdemQuery) (serveapi.IdemRecord, error) {
	rec, err := r.s.st.Idempotency.Inspect(ctx, idempotency.ID{Scope: in.Scope, Key: in.Key})
	if err != nil {
		return serveapi.IdemRecord{}, err
	}
	out := serveapi.IdemRecord{Scope: rec.Scope, Key: rec.Key, Exists: rec.Exists, Completed: rec.Completed,
		Fingerprint: rec.Fingerprint, Fence: rec.Fence, ClaimTTL: serveapi.Duration(rec.ClaimTTL), Expires: serveapi.Duration(rec.Expires)}
	if rec.Completed {
		out.Outcome = outcomeOut(rec.Outcome)
	}
	return out, nil
}
