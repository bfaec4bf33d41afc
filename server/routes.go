package server

import (
	crand "crypto/rand"
	"errors"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// Route is one API operation: its method, path and operation ID (the
// OpenAPI document's operationId, and the name a token's operation list
// uses).
type Route struct {
	Method, Path, OperationID string
}

// Routes lists the API's operations.
var routes = []Route{
	{"POST", "/v1/leases/acquire", "acquireLease"},
	{"POST", "/v1/leases/renew", "renewLease"},
	{"POST", "/v1/leases/release", "releaseLease"},
	{"GET", "/v1/leases/inspect", "inspectLease"},
	{"GET", "/v1/leases", "listLeases"},
	{"POST", "/v1/fenced/write", "fencedWrite"},
	{"GET", "/v1/fenced/read", "fencedRead"},
	{"POST", "/v1/idempotency/begin", "beginIdempotency"},
	{"POST", "/v1/idempotency/renew", "renewIdempotency"},
	{"POST", "/v1/idempotency/complete", "completeIdempotency"},
	{"POST", "/v1/idempotency/release", "releaseIdempotency"},
	{"GET", "/v1/idempotency/inspect", "inspectIdempotency"},
	{"POST", "/v1/rate/allow", "allowRate"},
	{"POST", "/v1/rate/reset", "resetRate"},
	{"POST", "/v1/permits/acquire", "acquirePermit"},
	{"POST", "/v1/permits/renew", "renewPermit"},
	{"POST", "/v1/permits/release", "releasePermit"},
	{"POST", "/v1/sessions", "createSession"},
	{"POST", "/v1/sessions/load", "loadSession"},
	{"POST", "/v1/sessions/touch", "touchSession"},
	{"POST", "/v1/sessions/save", "saveSession"},
	{"POST", "/v1/sessions/rotate", "rotateSession"},
	{"POST", "/v1/sessions/revoke", "revokeSession"},
	{"GET", "/v1/sessions", "listSessions"},
	{"POST", "/v1/sessions/revoke-user", "revokeUserSessions"},
	{"GET", "/v1/schedule/slots", "slotHistory"},
}

// Routes returns the API's operations (the authenticated /v1 routes).
func Routes() []Route { return append([]Route(nil), routes...) }

// OperationIDs returns the operation IDs of Routes.
func OperationIDs() []string {
	ids := make([]string, len(routes))
	for i, r := range routes {
		ids[i] = r.OperationID
	}
	return ids
}

func (s *Server) routes() {
	hs := map[string]handler{
		"acquireLease": s.acquireLease, "renewLease": s.renewLease, "releaseLease": s.releaseLease,
		"inspectLease": s.inspectLease, "listLeases": s.listLeases,
		"fencedWrite": s.fencedWrite, "fencedRead": s.fencedRead,
		"beginIdempotency": s.beginIdem, "renewIdempotency": s.renewIdem, "completeIdempotency": s.completeIdem,
		"releaseIdempotency": s.releaseIdem, "inspectIdempotency": s.inspectIdem,
		"allowRate": s.allowRate, "resetRate": s.resetRate,
		"acquirePermit": s.acquirePermit, "renewPermit": s.renewPermit, "releasePermit": s.releasePermit,
		"createSession": s.createSession, "loadSession": s.loadSession, "touchSession": s.touchSession,
		"saveSession": s.saveSession, "rotateSession": s.rotateSession, "revokeSession": s.revokeSession,
		"listSessions": s.listSessions, "revokeUserSessions": s.revokeUser,
		"slotHistory": s.slotHistory,
	}
	for _, rt := range routes {
		h, ok := hs[rt.OperationID]
		if !ok {
			panic("server: no handler for " + rt.OperationID)
		}
		s.mux.Handle(rt.Method+" "+rt.Path, s.api(rt.OperationID, h))
	}
	// Unknown /v1 routes answer with a problem, not the placeholder page.
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, serveapi.NewProblem(serveapi.TypeNotFound, "no such route: "+r.Method+" "+r.URL.Path))
	})
}

// ---- leases ----

func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.AcquireLease
	if !decode(w, r, &req) {
		return
	}
	if s.st.Leases == nil {
		notSupported(w, "leases")
		return
	}
	if req.Wait < 0 || req.Wait.D() > s.cfg.MaxWait {
		invalid(w, "wait %v out of range [0, %v]", req.Wait.D(), s.cfg.MaxWait)
		return
	}
	if !guard(w, p, "lease key", req.Key) {
		return
	}
	if err := leasedriver.ValidateHolder(req.Holder); err != nil {
		fail(w, err)
		return
	}
	token := req.Token
	if token == "" {
		token = lease.NewToken()
	}
	ctx := r.Context()
	deadline := time.Now().Add(req.Wait.D())
	for attempt := 0; ; attempt++ {
		g, err := leasedriver.AcquireAs(ctx, s.st.Leases, req.Key, token, req.TTL.D(), req.Holder)
		if err == nil {
			writeJSON(w, http.StatusOK, serveapi.LeaseGrant{Key: req.Key, Token: token, Fence: g.Fence, TTL: serveapi.Duration(g.TTL)})
			return
		}
		var held *lease.HeldError
		left := time.Until(deadline)
		if !errors.As(err, &held) || left <= 0 {
			fail(w, err)
			return
		}
		// Back off with jitter, never past the deadline nor much past the
		// holder's remaining time.
		d := min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond)
		d = d/2 + rand.N(d/2+1)
		d = min(d, left, held.TTL+time.Millisecond)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			fail(w, err)
			return
		case <-s.draining:
			t.Stop()
			fail(w, err)
			return
		}
	}
}

func (s *Server) renewLease(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.LeaseToken
	if !decode(w, r, &req) {
		return
	}
	if s.st.Leases == nil {
		notSupported(w, "leases")
		return
	}
	if !guard(w, p, "lease key", req.Key) {
		return
	}
	g, err := s.st.Leases.Renew(r.Context(), req.Key, req.Token, req.TTL.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, serveapi.LeaseGrant{Key: req.Key, Fence: g.Fence, TTL: serveapi.Duration(g.TTL)})
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.LeaseToken
	if !decode(w, r, &req) {
		return
	}
	if s.st.Leases == nil {
		notSupported(w, "leases")
		return
	}
	if !guard(w, p, "lease key", req.Key) {
		return
	}
	if err := s.st.Leases.Release(r.Context(), req.Key, req.Token); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func leaseInfo(i lease.Info) serveapi.LeaseInfo {
	return serveapi.LeaseInfo{Key: i.Key, Held: i.Held, Fence: i.Fence, TTL: serveapi.Duration(i.TTL), Holder: i.Holder}
}

func (s *Server) inspectLease(w http.ResponseWriter, r *http.Request, p principal) {
	if s.st.Leases == nil {
		notSupported(w, "leases")
		return
	}
	key := r.URL.Query().Get("key")
	if !guard(w, p, "lease key", key) {
		return
	}
	info, err := s.st.Leases.Inspect(r.Context(), key)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseInfo(info))
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, p principal) {
	l, ok := s.st.Leases.(lease.Lister)
	if !ok {
		notSupported(w, "a list of leases")
		return
	}
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("after")
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			invalid(w, "limit %q is not a number", v)
			return
		}
		limit = n
	}
	if !guard(w, p, "lease prefix", prefix) {
		return
	}
	infos, err := l.List(r.Context(), prefix, after, limit)
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.LeaseList{Leases: make([]serveapi.LeaseInfo, 0, len(infos))}
	for _, i := range infos {
		out.Leases = append(out.Leases, leaseInfo(i))
	}
	if len(infos) == limit {
		out.Next = infos[len(infos)-1].Key
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- fenced values ----

func (s *Server) fencedWrite(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.FencedWrite
	if !decode(w, r, &req) {
		return
	}
	if s.st.Fenced == nil {
		notSupported(w, "fenced values")
		return
	}
	if req.Value != "" && req.ValueBase64 != nil {
		invalid(w, "give value or value_base64, not both")
		return
	}
	if err := leasedriver.ValidateKey(req.Name); err != nil {
		fail(w, err)
		return
	}
	if req.Fence == 0 {
		invalid(w, "fence must be a lease's fence (at least 1)")
		return
	}
	if !guard(w, p, "fenced name", req.Name) {
		return
	}
	v := req.ValueBase64
	if v == nil {
		v = []byte(req.Value)
	}
	if err := s.st.Fenced.FencedWrite(r.Context(), req.Name, req.Fence, v); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) fencedRead(w http.ResponseWriter, r *http.Request, p principal) {
	if s.st.Fenced == nil {
		notSupported(w, "fenced values")
		return
	}
	name := r.URL.Query().Get("name")
	if err := leasedriver.ValidateKey(name); err != nil {
		fail(w, err)
		return
	}
	if !guard(w, p, "fenced name", name) {
		return
	}
	v, f, err := s.st.Fenced.FencedRead(r.Context(), name)
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.FencedValue{Name: name, Fence: f, ValueBase64: v}
	if out.ValueBase64 == nil {
		out.ValueBase64 = []byte{}
	}
	if utf8.Valid(v) {
		out.Value = string(v)
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- idempotency ----

func outcomeOut(o idempotency.Outcome) *serveapi.IdemOutcome {
	return &serveapi.IdemOutcome{Value: o.Value, Failed: o.Failed, Message: o.Message}
}

func (s *Server) beginIdem(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.IdemBegin
	if !decode(w, r, &req) {
		return
	}
	if s.st.Idempotency == nil {
		notSupported(w, "idempotency records")
		return
	}
	if !guard(w, p, "idempotency scope", req.Scope) {
		return
	}
	b, err := s.st.Idempotency.Begin(r.Context(), idemdriver.Begin{
		ID: idempotency.ID{Scope: req.Scope, Key: req.Key}, Fingerprint: req.Fingerprint,
		Token: secret.New(req.Token), ClaimTTL: req.ClaimTTL.D(), Retention: req.Retention.D(), Takeover: req.Takeover,
	})
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.IdemBegun{State: b.State.String(), Fence: b.Fence, TTL: serveapi.Duration(b.TTL)}
	if b.State == idemdriver.Completed {
		out.Outcome = outcomeOut(b.Outcome)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) idemClaim(w http.ResponseWriter, r *http.Request, p principal) (serveapi.IdemClaim, bool) {
	var req serveapi.IdemClaim
	if !decode(w, r, &req) {
		return req, false
	}
	if s.st.Idempotency == nil {
		notSupported(w, "idempotency records")
		return req, false
	}
	return req, guard(w, p, "idempotency scope", req.Scope)
}

func (s *Server) renewIdem(w http.ResponseWriter, r *http.Request, p principal) {
	req, ok := s.idemClaim(w, r, p)
	if !ok {
		return
	}
	if err := s.st.Idempotency.Renew(r.Context(), idempotency.ID{Scope: req.Scope, Key: req.Key}, req.Token, req.Fence, req.TTL.D()); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) completeIdem(w http.ResponseWriter, r *http.Request, p principal) {
	req, ok := s.idemClaim(w, r, p)
	if !ok {
		return
	}
	if req.Outcome == nil {
		invalid(w, "outcome is required")
		return
	}
	out := idempotency.Outcome{Value: req.Outcome.Value, Failed: req.Outcome.Failed, Message: req.Outcome.Message}
	if err := s.st.Idempotency.Complete(r.Context(), idempotency.ID{Scope: req.Scope, Key: req.Key}, req.Token, req.Fence, out, req.Retention.D()); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) releaseIdem(w http.ResponseWriter, r *http.Request, p principal) {
	req, ok := s.idemClaim(w, r, p)
	if !ok {
		return
	}
	if err := s.st.Idempotency.Release(r.Context(), idempotency.ID{Scope: req.Scope, Key: req.Key}, req.Token); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) inspectIdem(w http.ResponseWriter, r *http.Request, p principal) {
	if s.st.Idempotency == nil {
		notSupported(w, "idempotency records")
		return
	}
	q := r.URL.Query()
	id := idempotency.ID{Scope: q.Get("scope"), Key: q.Get("key")}
	if !guard(w, p, "idempotency scope", id.Scope) {
		return
	}
	rec, err := s.st.Idempotency.Inspect(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.IdemRecord{Scope: rec.Scope, Key: rec.Key, Exists: rec.Exists, Completed: rec.Completed,
		Fingerprint: rec.Fingerprint, Fence: rec.Fence, ClaimTTL: serveapi.Duration(rec.ClaimTTL), Expires: serveapi.Duration(rec.Expires)}
	if rec.Completed {
		out.Outcome = outcomeOut(rec.Outcome)
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- rate limits ----

// algorithms maps the wire names to algorithms.
var algorithms = map[string]ratelimit.Algorithm{
	"": ratelimit.GCRA, "gcra": ratelimit.GCRA, "fixed-window": ratelimit.FixedWindow,
	"sliding-log": ratelimit.SlidingLog, "sliding-window": ratelimit.SlidingWindow,
}

func stateKey(k serveapi.StateKey) driver.StateKey {
	return driver.StateKey{Group: k.Group, Name: k.Name, Kind: k.Kind, Key: k.Key}
}

func stateKeyOut(k driver.StateKey) serveapi.StateKey {
	return serveapi.StateKey{Group: k.Group, Name: k.Name, Kind: k.Kind, Key: k.Key}
}

// uninstrumented builds the limiters of rateRequest without telemetry: they
// only validate and normalize a limit and derive state keys (the store is
// called directly), and setting up a limiter's instruments for every
// request would cost more than the rest of the request's handling.
var uninstrumented = &ratelimit.Options{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}

// rateRequest builds the store request of one wire request: the limit is
// validated and normalized by ratelimit.New, and the state key is the
// one given or the single limiter's.
func (s *Server) rateRequest(w http.ResponseWriter, p principal, in serveapi.RateRequest, commit bool) (driver.Request, bool) {
	alg, ok := algorithms[in.Algorithm]
	if !ok {
		invalid(w, "unknown algorithm %q (gcra, fixed-window, sliding-log, sliding-window)", in.Algorithm)
		return driver.Request{}, false
	}
	lim, err := ratelimit.NewWithOptions(s.st.Limits, alg, ratelimit.Limit{Name: in.Limit.Name, Rate: in.Limit.Rate, Period: in.Limit.Period.D(), Burst: in.Limit.Burst}, uninstrumented)
	if err != nil {
		fail(w, err)
		return driver.Request{}, false
	}
	var key driver.StateKey
	switch {
	case in.State != nil && in.Key != "":
		invalid(w, "give key or state, not both")
		return driver.Request{}, false
	case in.State != nil:
		key = stateKey(*in.State)
	default:
		if key, err = lim.StateKey(in.Key); err != nil {
			fail(w, err)
			return driver.Request{}, false
		}
	}
	if !guard(w, p, "rate limit key", key.Key) {
		return driver.Request{}, false
	}
	n := 1
	if in.N != nil {
		n = *in.N
	}
	return driver.Request{Key: key, Algorithm: alg, Limit: lim.Limit(), N: n}, true
}

func (s *Server) allowRate(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.RateAllow
	if !decode(w, r, &req) {
		return
	}
	if s.st.Limits == nil {
		notSupported(w, "rate limits")
		return
	}
	if len(req.Requests) == 0 || len(req.Requests) > ratelimit.MaxGroup {
		invalid(w, "%d requests, want 1 to %d", len(req.Requests), ratelimit.MaxGroup)
		return
	}
	reqs := make([]driver.Request, 0, len(req.Requests))
	for _, in := range req.Requests {
		rr, ok := s.rateRequest(w, p, in, !req.Peek)
		if !ok {
			return
		}
		reqs = append(reqs, rr)
	}
	ds, err := s.st.Limits.Decide(r.Context(), reqs, !req.Peek)
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.RateDecisions{Allowed: true, Decisions: make([]serveapi.RateDecision, 0, len(ds))}
	for i, d := range ds {
		out.Allowed = out.Allowed && d.Allowed
		out.Decisions = append(out.Decisions, serveapi.RateDecision{
			Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: serveapi.Duration(d.RetryAfter), ResetAfter: serveapi.Duration(d.ResetAfter),
			Limit:     serveapi.Limit{Name: d.Limit.Name, Rate: d.Limit.Rate, Period: serveapi.Duration(d.Limit.Period), Burst: d.Limit.Burst},
			Algorithm: d.Algorithm.String(), At: d.At, State: stateKeyOut(reqs[i].Key),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) resetRate(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.RateReset
	if !decode(w, r, &req) {
		return
	}
	if s.st.Limits == nil {
		notSupported(w, "rate limits")
		return
	}
	if len(req.Requests) == 0 || len(req.Requests) > ratelimit.MaxGroup {
		invalid(w, "%d keys, want 1 to %d", len(req.Requests), ratelimit.MaxGroup)
		return
	}
	keys := make([]driver.StateKey, 0, len(req.Requests))
	for _, in := range req.Requests {
		if in.State != nil && in.Key == "" {
			// The exact state key: no limit needed.
			k := stateKey(*in.State)
			if !guard(w, p, "rate limit key", k.Key) {
				return
			}
			keys = append(keys, k)
			continue
		}
		rr, ok := s.rateRequest(w, p, in, false)
		if !ok {
			return
		}
		keys = append(keys, rr.Key)
	}
	if err := s.st.Limits.Reset(r.Context(), keys); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// permitKey is the state key of a permit request.
func permitKey(w http.ResponseWriter, p principal, in serveapi.Permit) (driver.StateKey, bool) {
	var k driver.StateKey
	switch {
	case in.State != nil && (in.Key != "" || in.Name != ""):
		invalid(w, "give state, or key and name, not both")
		return k, false
	case in.State != nil:
		k = stateKey(*in.State)
	default:
		if err := driver.ValidateKey(in.Key); err != nil {
			fail(w, err)
			return k, false
		}
		k = driver.StateKey{Name: in.Name, Kind: "p", Key: in.Key}
	}
	if k.Name == "" || k.Key == "" || k.Kind == "" {
		invalid(w, "a permit needs a key and a limit name")
		return k, false
	}
	return k, guard(w, p, "permit key", k.Key)
}

func permitOut(id string, g driver.PermitGrant) serveapi.PermitGrant {
	return serveapi.PermitGrant{ID: id, Acquired: g.Acquired, Fence: g.Fence, InUse: g.InUse,
		RetryAfter: serveapi.Duration(g.RetryAfter), TTL: serveapi.Duration(g.TTL), At: g.At}
}

func (s *Server) permitRequest(w http.ResponseWriter, r *http.Request, p principal) (serveapi.Permit, driver.StateKey, bool) {
	var req serveapi.Permit
	if !decode(w, r, &req) {
		return req, driver.StateKey{}, false
	}
	if s.st.Limits == nil {
		notSupported(w, "rate limits")
		return req, driver.StateKey{}, false
	}
	k, ok := permitKey(w, p, req)
	return req, k, ok
}

func (s *Server) acquirePermit(w http.ResponseWriter, r *http.Request, p principal) {
	req, k, ok := s.permitRequest(w, r, p)
	if !ok {
		return
	}
	id := req.ID
	if id == "" {
		id = crand.Text()
	}
	g, err := s.st.Limits.AcquirePermit(r.Context(), k, id, req.Permits, req.TTL.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, permitOut(id, g))
}

func (s *Server) renewPermit(w http.ResponseWriter, r *http.Request, p principal) {
	req, k, ok := s.permitRequest(w, r, p)
	if !ok {
		return
	}
	g, err := s.st.Limits.RenewPermit(r.Context(), k, req.ID, req.TTL.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, permitOut(req.ID, g))
}

func (s *Server) releasePermit(w http.ResponseWriter, r *http.Request, p principal) {
	req, k, ok := s.permitRequest(w, r, p)
	if !ok {
		return
	}
	if err := s.st.Limits.ReleasePermit(r.Context(), k, req.ID); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- sessions ----

func sessionOut(rec session.Record) serveapi.SessionRecord {
	return serveapi.SessionRecord{ID: string(rec.ID), UserID: rec.UserID, Data: rec.Data, Version: rec.Version,
		Created: rec.Created, IdleUntil: rec.IdleUntil, AbsoluteUntil: rec.AbsoluteUntil}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.SessionCreate
	if !decode(w, r, &req) {
		return
	}
	if s.st.Sessions == nil {
		notSupported(w, "sessions")
		return
	}
	if !guard(w, p, "user", req.UserID) {
		return
	}
	if req.ID != "" {
		if req.Values != nil {
			invalid(w, "values are for a session the server makes the token of; with id, give data")
			return
		}
		rec, err := s.st.Sessions.Create(r.Context(), session.Record{ID: session.ID(req.ID), UserID: req.UserID, Data: req.Data}, req.Idle.D(), req.Absolute.D())
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, sessionOut(rec))
		return
	}
	if req.Data != nil {
		invalid(w, "data is for a session stored under a given id; without id, give values")
		return
	}
	for _, d := range []time.Duration{req.Idle.D(), req.Absolute.D()} {
		if err := sessiondriver.ValidateTimeout(d); err != nil {
			fail(w, err)
			return
		}
	}
	m, err := session.New(s.st.Sessions, &session.Options{IdleTimeout: req.Idle.D(), AbsoluteTimeout: req.Absolute.D(), Logger: s.log})
	if err != nil {
		fail(w, err)
		return
	}
	tok, _, err := m.Create(r.Context(), req.UserID, req.Values)
	if err != nil {
		fail(w, err)
		return
	}
	rec, err := s.st.Sessions.Load(r.Context(), tok.ID(), 0)
	if err != nil {
		fail(w, err)
		return
	}
	out := sessionOut(rec)
	out.Token = tok.Reveal()
	writeJSON(w, http.StatusCreated, out)
}

// sessionID resolves a reference to a session ID and checks, for a token
// limited to some namespaces, that the session's user lies in them (a
// read that refreshes nothing). It writes the problem and returns false
// on failure.
func (s *Server) sessionID(w http.ResponseWriter, r *http.Request, p principal, ref serveapi.SessionRef) (session.ID, bool) {
	if s.st.Sessions == nil {
		notSupported(w, "sessions")
		return "", false
	}
	var id session.ID
	switch {
	case ref.ID != "" && ref.Token != "":
		invalid(w, "give id or token, not both")
		return "", false
	case ref.Token != "":
		tok, err := session.ParseToken(ref.Token)
		if err != nil {
			fail(w, err)
			return "", false
		}
		id = tok.ID()
	default:
		id = session.ID(ref.ID)
	}
	if err := id.Validate(); err != nil {
		fail(w, err)
		return "", false
	}
	if !p.allows("") {
		rec, err := s.st.Sessions.Load(r.Context(), id, 0)
		switch {
		case errors.Is(err, session.ErrNotFound):
			// Nothing to protect; the operation answers not found.
		case err != nil:
			fail(w, err)
			return "", false
		case !guard(w, p, "user", rec.UserID):
			return "", false
		}
	}
	return id, true
}

func (s *Server) sessionRef(w http.ResponseWriter, r *http.Request, p principal) (serveapi.SessionRef, session.ID, bool) {
	var req serveapi.SessionRef
	if !decode(w, r, &req) {
		return req, "", false
	}
	id, ok := s.sessionID(w, r, p, req)
	return req, id, ok
}

func (s *Server) loadSession(w http.ResponseWriter, r *http.Request, p principal) {
	req, id, ok := s.sessionRef(w, r, p)
	if !ok {
		return
	}
	rec, err := s.st.Sessions.Load(r.Context(), id, req.Idle.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOut(rec))
}

func (s *Server) touchSession(w http.ResponseWriter, r *http.Request, p principal) {
	req, id, ok := s.sessionRef(w, r, p)
	if !ok {
		return
	}
	t, err := s.st.Sessions.Touch(r.Context(), id, req.Version, req.Idle.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, serveapi.SessionTouched{IdleUntil: t})
}

func (s *Server) saveSession(w http.ResponseWriter, r *http.Request, p principal) {
	req, id, ok := s.sessionRef(w, r, p)
	if !ok {
		return
	}
	rec, err := s.st.Sessions.Save(r.Context(), id, req.Version, req.Data, req.Idle.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOut(rec))
}

func (s *Server) rotateSession(w http.ResponseWriter, r *http.Request, p principal) {
	req, id, ok := s.sessionRef(w, r, p)
	if !ok {
		return
	}
	rec, err := s.st.Sessions.Rotate(r.Context(), id, session.ID(req.NewID), req.Version, req.Data, req.Idle.D())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOut(rec))
}

func (s *Server) revokeSession(w http.ResponseWriter, r *http.Request, p principal) {
	_, id, ok := s.sessionRef(w, r, p)
	if !ok {
		return
	}
	if err := s.st.Sessions.Delete(r.Context(), id); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, p principal) {
	if s.st.Sessions == nil {
		notSupported(w, "sessions")
		return
	}
	user := r.URL.Query().Get("user_id")
	if !guard(w, p, "user", user) {
		return
	}
	recs, err := s.st.Sessions.List(r.Context(), user)
	if err != nil {
		fail(w, err)
		return
	}
	out := serveapi.SessionList{Sessions: make([]serveapi.SessionRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Sessions = append(out.Sessions, sessionOut(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeUser(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.UserRef
	if !decode(w, r, &req) {
		return
	}
	if s.st.Sessions == nil {
		notSupported(w, "sessions")
		return
	}
	if !guard(w, p, "user", req.UserID) {
		return
	}
	n, err := s.st.Sessions.DeleteUser(r.Context(), req.UserID)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, serveapi.Revoked{Removed: n})
}

// ---- schedules ----

func (s *Server) slotHistory(w http.ResponseWriter, r *http.Request, p principal) {
	if s.st.Schedules == nil {
		notSupported(w, "schedules")
		return
	}
	q := r.URL.Query()
	job := q.Get("job")
	if !guard(w, p, "job", job) {
		return
	}
	parse := func(name string, def time.Time) (time.Time, bool) {
		v := q.Get(name)
		if v == "" {
			return def, true
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			invalid(w, "%s %q is not an RFC 3339 time", name, v)
			return t, false
		}
		return t, true
	}
	now := time.Now()
	from, ok := parse("from", now.Add(-24*time.Hour))
	if !ok {
		return
	}
	to, ok := parse("to", now.Add(time.Minute))
	if !ok {
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			invalid(w, "limit %q out of range [1, 1000]", v)
			return
		}
		limit = n
	}
	recs, err := s.st.Schedules.Slots(r.Context(), job, from, to, limit)
	if err != nil {
		fail(w, err)
		return
	}
	if recs == nil {
		recs = []schedule.Record{}
	}
	writeJSON(w, http.StatusOK, struct {
		Slots []schedule.Record `json:"slots"`
	}{recs})
}
