package server

import (
	"context"
	"fmt"
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
		Needs: idemView, Scope: "scope", Problems: []string{"mismatch", "in_progress"}, Handle: beginIdempotency,
		Doc: "Claim an idempotency record, or answer from the live record: claimed (with the token the server made when none was given), " +
			"completed (the recorded outcome) or abandoned; a key reused for other input is the mismatch problem (422), a live claim of another " +
			"attempt the in_progress problem (409, Retry-After). Defaults: claim_ttl 30s, retention 24h; request gives the HTTP request the key " +
			"guards, whose fingerprint the server computes as the Go middleware does.",
		Example: serveapi.IdemBegin{Scope: "billing/charge", Key: "order-1234",
			Request: &serveapi.IdemRequest{Method: "POST", URI: "/charges", ContentType: "application/json", Body: []byte(`{"amount":1200}`)}}},
	&op[serveapi.IdemClaim, noBody]{Method: "POST", Path: "/v1/idempotency/renew", ID: "renewIdempotency",
		Needs: idemView, Scope: "scope", Required: []string{"fence"}, Problems: []string{"lost"},
		Doc:     "Extend a claim held by token and fence, by ttl from now (default 30s).",
		Example: serveapi.IdemClaim{Scope: "billing/charge", Key: "order-1234", Token: "claim-7c1e9a", Fence: 1796137794183175, TTL: serveapi.Duration(30 * time.Second)},
		Handle: func(ctx context.Context, r *request, in serveapi.IdemClaim) (noBody, error) {
			return noBody{}, r.s.st.Idempotency.Renew(ctx, idemID(in), in.Token, in.Fence, orDur(in.TTL.D(), DefaultIdemClaimTTL))
		}},
	&op[serveapi.IdemClaim, noBody]{Method: "POST", Path: "/v1/idempotency/complete", ID: "completeIdempotency",
		Needs: idemView, Scope: "scope", Required: []string{"fence", "outcome"}, Problems: []string{"lost"}, Handle: completeIdempotency,
		Doc: "Record the outcome of the claim held by token and fence, kept for retention from now (default 24h).",
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

// The defaults of the idempotency operations, those of idempotency.Keeper.
const (
	DefaultIdemClaimTTL  = 30 * time.Second
	DefaultIdemRetention = 24 * time.Hour
)

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func beginIdempotency(ctx context.Context, r *request, in serveapi.IdemBegin) (serveapi.IdemBegun, error) {
	fp, made := in.Fingerprint, false
	if in.Request != nil {
		if fp != "" {
			return serveapi.IdemBegun{}, invalidf("give fingerprint or request, not both")
		}
		if in.Request.Method == "" || in.Request.URI == "" {
			return serveapi.IdemBegun{}, invalidf("request needs a method and a uri")
		}
		fp, made = idempotency.Fingerprint([]byte(in.Request.Method), []byte(in.Request.URI), []byte(in.Request.ContentType), in.Request.Body), true
	}
	tok, newTok := in.Token, false
	if tok == "" {
		tok, newTok = idempotency.NewToken().Reveal(), true
	}
	b, err := r.s.st.Idempotency.Begin(ctx, idemdriver.Begin{
		ID: idempotency.ID{Scope: in.Scope, Key: in.Key}, Fingerprint: fp,
		Token: secret.New(tok), ClaimTTL: orDur(in.ClaimTTL.D(), DefaultIdemClaimTTL), Retention: orDur(in.Retention.D(), DefaultIdemRetention),
		Takeover: in.Takeover,
	})
	if err != nil {
		return serveapi.IdemBegun{}, err
	}
	switch b.State {
	case idemdriver.Mismatch:
		return serveapi.IdemBegun{}, fmt.Errorf("%w: key %q in scope %q was used for other input", idempotency.ErrMismatch, in.Key, in.Scope)
	case idemdriver.InProgress:
		return serveapi.IdemBegun{}, &idempotency.InProgressError{Scope: in.Scope, Key: in.Key, RetryAfter: b.TTL}
	}
	out := serveapi.IdemBegun{State: b.State.String(), Fence: b.Fence, TTL: serveapi.Duration(b.TTL)}
	if made {
		out.Fingerprint = fp
	}
	switch b.State {
	case idemdriver.Completed:
		out.Outcome = outcomeOut(b.Outcome)
	case idemdriver.Claimed:
		if newTok {
			out.Token = tok
		}
	}
	return out, nil
}

func completeIdempotency(ctx context.Context, r *request, in serveapi.IdemClaim) (noBody, error) {
	if in.Outcome == nil {
		return noBody{}, invalidf("outcome is required")
	}
	out := idempotency.Outcome{Value: in.Outcome.Value, Failed: in.Outcome.Failed, Message: in.Outcome.Message}
	return noBody{}, r.s.st.Idempotency.Complete(ctx, idemID(in), in.Token, in.Fence, out, orDur(in.Retention.D(), DefaultIdemRetention))
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
