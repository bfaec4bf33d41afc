package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/serveapi"
)

// idemRow is an idempotency record as the dashboard lists it.
type idemRow struct {
	Scope       string            `json:"scope"`
	Key         string            `json:"key"`
	State       string            `json:"state"`
	Fence       uint64            `json:"fence"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	ClaimTTL    serveapi.Duration `json:"claim_ttl,omitempty"`
	Expires     serveapi.Duration `json:"expires,omitempty"`
}

// idemList is the dashboard's idempotency panel: the records in progress
// or of unknown outcome in the token's namespaces, when the store lists
// them (idempotency.Admin).
type idemList struct {
	Admin   bool      `json:"admin"`
	Records []idemRow `json:"records"`
}

// idemAdmin returns the store's operator surface, if it has one.
func (s *Server) idemAdmin() (idempotency.Admin, bool) {
	a, ok := s.st.Idempotency.(idempotency.Admin)
	return a, ok
}

// idemPanel lists the records of unknown outcome, then those in
// progress, in each of p's namespaces (at most maxRows in all). It needs
// inspectIdempotency.
func (d *dashboard) idemPanel(ctx context.Context, p principal) *panel {
	rec := &recorder{h: http.Header{}}
	const maxRows = 100
	switch a, ok := d.s.idemAdmin(); {
	case !p.t.all && !p.t.ops["inspectIdempotency"]:
		writeProblem(rec, serveapi.NewProblem(serveapi.TypeForbidden, "token \""+p.t.name+"\" may not call inspectIdempotency"))
	case !ok:
		writeJSON(rec, http.StatusOK, idemList{Records: []idemRow{}})
	default:
		out := idemList{Admin: true, Records: []idemRow{}}
		prefixes := slices.Clone(p.t.prefixes)
		if slices.Contains(prefixes, "") {
			prefixes = []string{""}
		}
	states:
		for _, st := range []idempotency.RecordState{idempotency.StateUnknown, idempotency.StateInProgress} {
			for _, pre := range prefixes {
				left := maxRows - len(out.Records)
				if left <= 0 {
					break states
				}
				recs, err := a.List(ctx, idempotency.Filter{State: st, ScopePrefix: pre, Limit: left})
				if err != nil {
					rec = &recorder{h: http.Header{}}
					fail(rec, err)
					return &panel{Status: rec.status, Body: rec.buf.Bytes()}
				}
				for _, r := range recs {
					if !InNamespace(r.Scope, pre) {
						continue // listed by raw prefix; a namespace is a path segment
					}
					out.Records = append(out.Records, idemRow{Scope: r.Scope, Key: r.Key, State: r.State().String(), Fence: r.Fence,
						Fingerprint: r.Fingerprint, ClaimTTL: serveapi.Duration(r.ClaimTTL), Expires: serveapi.Duration(r.Expires)})
				}
			}
		}
		writeJSON(rec, http.StatusOK, out)
	}
	return &panel{Status: rec.status, Body: rec.buf.Bytes()}
}

// defaultResolveRetention is how long a result an operator records is
// kept when the request names no retention (the Keeper's default).
const defaultResolveRetention = 24 * time.Hour

// idemSettle is the body of the dashboard's resolve and release of an
// idempotency record: the record, the fence it was listed with, whether
// a live claim is overridden, and for resolve the outcome, its retention
// (default 24h) and whether an empty result is meant (AllowEmpty).
type idemSettle struct {
	Scope     string                `json:"scope"`
	Key       string                `json:"key"`
	Fence     uint64                `json:"fence"`
	Force     bool                  `json:"force,omitempty"`
	Outcome   *serveapi.IdemOutcome `json:"outcome,omitempty"`
	Retention serveapi.Duration     `json:"retention,omitempty"`
	// AllowEmpty records a successful outcome with an empty value: every
	// later request with the key then replays an empty answer, so it must
	// be asked for.
	AllowEmpty bool `json:"allow_empty,omitempty"`
}

func (d *dashboard) settleRequest(w http.ResponseWriter, r *http.Request, p principal) (idempotency.Admin, idemSettle, bool) {
	var req idemSettle
	if err := decodeBody(r, &req); err != nil {
		fail(w, err)
		return nil, req, false
	}
	a, ok := d.s.idemAdmin()
	if !ok {
		fail(w, notSupported("an operator's list or settlement of idempotency records"))
		return nil, req, false
	}
	if err := (&request{s: d.s, p: p}).guard("idempotency scope", req.Scope); err != nil {
		fail(w, err)
		return nil, req, false
	}
	return a, req, true
}

// resolveIdem records an outcome for a record of unknown outcome
// (idempotency.Admin.Resolve). A successful outcome with an empty value
// is refused unless the request says allow_empty. It needs
// completeIdempotency.
func (d *dashboard) resolveIdem(w http.ResponseWriter, r *http.Request, p principal) {
	a, req, ok := d.settleRequest(w, r, p)
	if !ok {
		return
	}
	if req.Outcome == nil {
		fail(w, invalidf("outcome is required"))
		return
	}
	if !req.Outcome.Failed && len(req.Outcome.Value) == 0 && !req.AllowEmpty {
		fail(w, invalidf("the result is empty: every later request with key %q would replay an empty answer; "+
			"send allow_empty true to record an empty result", req.Key))
		return
	}
	s := idempotency.Settle{ID: idempotency.ID{Scope: req.Scope, Key: req.Key}, Fence: req.Fence, Force: req.Force}
	out := idempotency.Outcome{Value: req.Outcome.Value, Failed: req.Outcome.Failed, Message: req.Outcome.Message}
	retention := req.Retention.D()
	if retention == 0 {
		retention = defaultResolveRetention
	}
	if err := a.Resolve(r.Context(), s, out, retention); err != nil {
		failSettle(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forceReleaseIdem drops the claim of a record of unknown outcome
// (idempotency.Admin.ForceRelease). It needs releaseIdempotency.
func (d *dashboard) forceReleaseIdem(w http.ResponseWriter, r *http.Request, p principal) {
	a, req, ok := d.settleRequest(w, r, p)
	if !ok {
		return
	}
	s := idempotency.Settle{ID: idempotency.ID{Scope: req.Scope, Key: req.Key}, Fence: req.Fence, Force: req.Force}
	if err := a.ForceRelease(r.Context(), s); err != nil {
		failSettle(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failSettle writes the problem of a refused settlement.
func failSettle(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		writeProblem(w, serveapi.NewProblem(serveapi.TypeNotFound, err.Error()))
	case errors.Is(err, idempotency.ErrChanged):
		writeProblem(w, serveapi.NewProblem(serveapi.TypeStale, err.Error()))
	case errors.Is(err, idempotency.ErrCompleted):
		writeProblem(w, serveapi.NewProblem(serveapi.TypeConflict, err.Error()))
	default:
		fail(w, err)
	}
}
