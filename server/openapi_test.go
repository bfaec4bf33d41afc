package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/server"
)

type openapiDoc struct {
	OpenAPI string                           `json:"openapi"`
	Paths   map[string]map[string]openapiOp  `json:"paths"`
	Comp    struct{ Schemas map[string]any } `json:"components"`
}

type openapiOp struct {
	OperationID string                     `json:"operationId"`
	Responses   map[string]json.RawMessage `json:"responses"`
	RequestBody json.RawMessage            `json:"requestBody"`
}

func loadDoc(t *testing.T) openapiDoc {
	t.Helper()
	var d openapiDoc
	if err := json.Unmarshal(server.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenAPIDescribesEveryRoute: every route is documented under its
// method, path and operation ID, every documented operation is a route,
// operation IDs are unique, and every schema reference resolves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	d := loadDoc(t)
	if d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", d.OpenAPI)
	}
	routes := server.Routes()
	for _, rt := range routes {
		op, ok := d.Paths[rt.Path][strings.ToLower(rt.Method)]
		if !ok || op.OperationID != rt.OperationID {
			t.Errorf("%s %s (%s) not documented: %+v", rt.Method, rt.Path, rt.OperationID, op)
		}
		if (rt.Method == "POST") != (op.RequestBody != nil) {
			t.Errorf("%s: request body documented %v for %s", rt.OperationID, op.RequestBody != nil, rt.Method)
		}
		if _, ok := op.Responses["401"]; !ok {
			t.Errorf("%s: no 401 documented", rt.OperationID)
		}
	}
	seen := map[string]bool{}
	unauth := []string{"health", "ready", "metrics", "openapi"}
	for path, ops := range d.Paths {
		for method, op := range ops {
			if seen[op.OperationID] {
				t.Errorf("operation ID %s twice", op.OperationID)
			}
			seen[op.OperationID] = true
			if slices.Contains(unauth, op.OperationID) {
				continue
			}
			if !slices.ContainsFunc(routes, func(r server.Route) bool {
				return r.Path == path && strings.ToLower(r.Method) == method && r.OperationID == op.OperationID
			}) {
				t.Errorf("documented %s %s (%s) is not a route", method, path, op.OperationID)
			}
		}
	}
	for _, id := range []string{"acquireLease", "renewLease", "releaseLease", "inspectLease", "listLeases", "fencedWrite", "fencedRead",
		"beginIdempotency", "completeIdempotency", "releaseIdempotency", "allowRate", "acquirePermit", "releasePermit",
		"createSession", "loadSession", "saveSession", "revokeSession", "listSessions", "revokeUserSessions", "slotHistory"} {
		if !seen[id] {
			t.Errorf("operation %s missing", id)
		}
	}
	raw := string(server.OpenAPI())
	for _, part := range strings.Split(raw, `"$ref": "#/components/schemas/`)[1:] {
		name := part[:strings.IndexByte(part, '"')]
		if _, ok := d.Comp.Schemas[name]; !ok {
			t.Errorf("unresolved schema reference %s", name)
		}
	}
}

// TestOpenAPIEveryOperationExercised calls every documented operation and
// checks it answers with its documented success status.
func TestOpenAPIEveryOperationExercised(t *testing.T) {
	d := loadDoc(t)
	m := newMem(t, nil)
	srv, err := server.New(server.Stores{Leases: m.Leases(), Idempotency: m.Idempotency(), Limits: m.Limits(),
		Sessions: m.Sessions(), Schedules: m.Schedules(), Fenced: fencedMem{m}},
		&server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "# metrics\n") })})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{mem: m, srv: srv, url: hs.URL}
	called := map[string]bool{}
	statusOf := map[string]string{}
	for _, ops := range d.Paths {
		for _, op := range ops {
			for st := range op.Responses {
				if st[0] == '2' {
					statusOf[op.OperationID] = st
				}
			}
		}
	}
	call := func(id, method, path string, body any, out any) {
		t.Helper()
		st, b, _ := e.do(t, adminTok, method, path, body)
		if want := statusOf[id]; itoa(st) != want {
			t.Fatalf("%s: status %d, want %s: %s", id, st, want, b)
		}
		called[id] = true
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
	}
	ttl := serveapi.Duration(time.Minute)
	var g serveapi.LeaseGrant
	call("acquireLease", "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: ttl}, &g)
	call("renewLease", "POST", "/v1/leases/renew", serveapi.LeaseToken{Key: "k", Token: g.Token, TTL: ttl}, nil)
	call("inspectLease", "GET", "/v1/leases/inspect?key=k", nil, nil)
	call("listLeases", "GET", "/v1/leases", nil, nil)
	call("fencedWrite", "POST", "/v1/fenced/write", serveapi.FencedWrite{Name: "r", Fence: g.Fence, Value: "v"}, nil)
	call("fencedRead", "GET", "/v1/fenced/read?name=r", nil, nil)
	call("releaseLease", "POST", "/v1/leases/release", serveapi.LeaseToken{Key: "k", Token: g.Token}, nil)

	var b serveapi.IdemBegun
	begin := serveapi.IdemBegin{Scope: "s", Key: "k1", Fingerprint: "f", Token: "claim-1", ClaimTTL: ttl, Retention: serveapi.Duration(time.Hour)}
	call("beginIdempotency", "POST", "/v1/idempotency/begin", begin, &b)
	call("renewIdempotency", "POST", "/v1/idempotency/renew", serveapi.IdemClaim{Scope: "s", Key: "k1", Token: "claim-1", Fence: b.Fence, TTL: ttl}, nil)
	call("completeIdempotency", "POST", "/v1/idempotency/complete", serveapi.IdemClaim{Scope: "s", Key: "k1", Token: "claim-1", Fence: b.Fence,
		Outcome: &serveapi.IdemOutcome{Value: []byte("ok")}, Retention: serveapi.Duration(time.Hour)}, nil)
	var rec serveapi.IdemRecord
	call("inspectIdempotency", "GET", "/v1/idempotency/inspect?scope=s&key=k1", nil, &rec)
	if !rec.Completed || string(rec.Outcome.Value) != "ok" {
		t.Fatalf("record %+v", rec)
	}
	begin.Key, begin.Token = "k2", "claim-2"
	call("beginIdempotency", "POST", "/v1/idempotency/begin", begin, nil)
	call("releaseIdempotency", "POST", "/v1/idempotency/release", serveapi.IdemClaim{Scope: "s", Key: "k2", Token: "claim-2"}, nil)

	rq := serveapi.RateRequest{Key: "u", Limit: serveapi.Limit{Rate: 1, Period: serveapi.Duration(time.Hour)}}
	var ds serveapi.RateDecisions
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if !ds.Allowed {
		t.Fatalf("first request denied: %+v", ds)
	}
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if ds.Allowed || ds.Decisions[0].RetryAfter <= 0 {
		t.Fatalf("second request: %+v", ds)
	}
	call("resetRate", "POST", "/v1/rate/reset", serveapi.RateReset{Requests: []serveapi.RateRequest{rq}}, nil)
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if !ds.Allowed {
		t.Fatalf("after reset: %+v", ds)
	}
	var pg serveapi.PermitGrant
	call("acquirePermit", "POST", "/v1/permits/acquire", serveapi.Permit{Key: "u", Name: "jobs", Permits: 2, TTL: ttl}, &pg)
	call("renewPermit", "POST", "/v1/permits/renew", serveapi.Permit{Key: "u", Name: "jobs", ID: pg.ID, TTL: ttl}, nil)
	call("releasePermit", "POST", "/v1/permits/release", serveapi.Permit{Key: "u", Name: "jobs", ID: pg.ID}, nil)

	var sr serveapi.SessionRecord
	call("createSession", "POST", "/v1/sessions", serveapi.SessionCreate{UserID: "alice", Values: map[string]string{"a": "1"},
		Idle: serveapi.Duration(time.Hour), Absolute: serveapi.Duration(2 * time.Hour)}, &sr)
	if sr.Token == "" {
		t.Fatal("no token for a session the server made")
	}
	call("loadSession", "POST", "/v1/sessions/load", serveapi.SessionRef{Token: sr.Token, Idle: serveapi.Duration(time.Hour)}, nil)
	call("touchSession", "POST", "/v1/sessions/touch", serveapi.SessionRef{ID: sr.ID, Version: 1, Idle: serveapi.Duration(time.Hour)}, nil)
	call("saveSession", "POST", "/v1/sessions/save", serveapi.SessionRef{ID: sr.ID, Version: 1, Data: []byte("{}"), Idle: serveapi.Duration(time.Hour)}, &sr)
	call("rotateSession", "POST", "/v1/sessions/rotate", serveapi.SessionRef{ID: sr.ID, NewID: sr.ID[:len(sr.ID)-4] + "abcd", Version: 2, Idle: serveapi.Duration(time.Hour)}, &sr)
	var sl serveapi.SessionList
	call("listSessions", "GET", "/v1/sessions?user_id=alice", nil, &sl)
	if len(sl.Sessions) != 1 {
		t.Fatalf("sessions %+v", sl)
	}
	call("revokeSession", "POST", "/v1/sessions/revoke", serveapi.SessionRef{ID: sr.ID}, nil)
	call("revokeUserSessions", "POST", "/v1/sessions/revoke-user", serveapi.UserRef{UserID: "alice"}, nil)
	call("slotHistory", "GET", "/v1/schedule/slots?job=nightly", nil, nil)
	call("health", "GET", "/healthz", nil, nil)
	call("ready", "GET", "/readyz", nil, nil)
	call("metrics", "GET", "/metrics", nil, nil)
	call("openapi", "GET", "/v1/openapi.json", nil, nil)

	for _, ops := range d.Paths {
		for _, op := range ops {
			if !called[op.OperationID] {
				t.Errorf("documented operation %s not exercised", op.OperationID)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
