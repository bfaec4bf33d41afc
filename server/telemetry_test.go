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

	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/server"
)

// meteredEnv is a server over a memory store recording into a fresh
// Telemetry.
func meteredEnv(t *testing.T) (*obstest.Telemetry, *env) {
	t.Helper()
	tl := obstest.New()
	_, st := memStores(t)
	srv, err := server.New(st, &server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MeterProvider: tl.Meter})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return tl, &env{srv: srv, url: hs.URL}
}

// TestAPIMetrics: API traffic records the instruments of the metrics
// contract, per operation, store and outcome, and no key, scope, user or
// token becomes an attribute value.
func TestAPIMetrics(t *testing.T) {
	tl, e := meteredEnv(t)
	post := func(path string, body any, want int) []byte {
		t.Helper()
		code, b, _ := e.do(t, adminTok, "POST", path, body)
		if code != want {
			t.Fatalf("POST %s: %d %s, want %d", path, code, b, want)
		}
		return b
	}

	// Leases: granted, held, a renewal refused (lost), released.
	var g serveapi.LeaseGrant
	json.Unmarshal(post("/v1/leases/acquire", serveapi.AcquireLease{Key: "orders/secret-key-1", TTL: serveapi.Duration(time.Minute)}, 200), &g)
	post("/v1/leases/acquire", serveapi.AcquireLease{Key: "orders/secret-key-1", TTL: serveapi.Duration(time.Minute)}, 409)
	post("/v1/leases/renew", serveapi.LeaseToken{Key: "orders/secret-key-1", Token: "not-the-token-0123456789", TTL: serveapi.Duration(time.Minute)}, 409)
	post("/v1/leases/release", serveapi.LeaseToken{Key: "orders/secret-key-1", Token: g.Token}, 204)

	// Idempotency: executed once, then replayed.
	var b serveapi.IdemBegun
	json.Unmarshal(post("/v1/idempotency/begin", serveapi.IdemBegin{Scope: "payments", Key: "order-secret-9", Fingerprint: "f"}, 200), &b)
	post("/v1/idempotency/complete", serveapi.IdemClaim{Scope: "payments", Key: "order-secret-9", Token: b.Token, Fence: b.Fence,
		Outcome: &serveapi.IdemOutcome{Value: []byte("ok")}}, 204)
	post("/v1/idempotency/begin", serveapi.IdemBegin{Scope: "payments", Key: "order-secret-9", Fingerprint: "f"}, 200)

	// Rate limits: two allowed, one denied, a peek not counted.
	lim := serveapi.Limit{Name: "api", Rate: 2, Period: serveapi.Duration(time.Minute)}
	for range 3 {
		e.do(t, adminTok, "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "user-secret-42", Limit: &lim}}})
	}
	post("/v1/rate/allow", serveapi.RateAllow{Peek: true, Requests: []serveapi.RateRequest{{Key: "user-secret-42", Limit: &lim}}}, 200)

	// Sessions: created, loaded, revoked, then not found.
	var rec serveapi.SessionRecord
	var created struct {
		serveapi.SessionRecord
		Token string `json:"token"`
	}
	json.Unmarshal(post("/v1/sessions", serveapi.SessionCreate{UserID: "alice-secret", Idle: serveapi.Duration(time.Hour), Absolute: serveapi.Duration(2 * time.Hour)}, 201), &created)
	rec = created.SessionRecord
	post("/v1/sessions/load", serveapi.SessionRef{ID: rec.ID}, 200)
	post("/v1/sessions/revoke", serveapi.SessionRef{ID: rec.ID}, 204)
	post("/v1/sessions/load", serveapi.SessionRef{ID: rec.ID}, 404)

	for _, c := range []struct {
		name string
		attr map[string]string
		want int64
	}{
		{"tenure.lease.acquires", map[string]string{"store": "memstore", "outcome": "granted"}, 1},
		{"tenure.lease.acquires", map[string]string{"store": "memstore", "outcome": "held"}, 1},
		{"tenure.lease.lost", map[string]string{"store": "memstore"}, 1},
		{"tenure.idempotency.requests", map[string]string{"store": "memstore", "outcome": "executed"}, 1},
		{"tenure.idempotency.requests", map[string]string{"store": "memstore", "outcome": "replayed"}, 1},
		{"tenure.ratelimit.decisions", map[string]string{"store": "memstore", "limit": "api", "decision": "allowed"}, 2},
		{"tenure.ratelimit.decisions", map[string]string{"store": "memstore", "limit": "api", "decision": "denied"}, 1},
		{"tenure.session.operations", map[string]string{"store": "memstore", "op": "create", "outcome": "ok"}, 1},
		{"tenure.session.operations", map[string]string{"store": "memstore", "op": "load", "outcome": "ok"}, 1},
		{"tenure.session.operations", map[string]string{"store": "memstore", "op": "load", "outcome": "not_found"}, 1},
		{"tenure.session.operations", map[string]string{"store": "memstore", "op": "revoke", "outcome": "ok"}, 1},
	} {
		if got := tl.Count(t, c.name, c.attr); got != c.want {
			t.Errorf("%s %v = %d, want %d", c.name, c.attr, got, c.want)
		}
	}
	for _, c := range []struct {
		attr map[string]string
		want uint64
	}{
		{map[string]string{"store": "memstore", "op": "lease.acquire", "outcome": "ok"}, 1},
		{map[string]string{"store": "memstore", "op": "lease.acquire", "outcome": "held"}, 1},
		{map[string]string{"store": "memstore", "op": "lease.renew", "outcome": "not_held"}, 1},
		{map[string]string{"store": "memstore", "op": "idempotency.begin"}, 2},
		{map[string]string{"store": "memstore", "op": "ratelimit.decide"}, 4},
		{map[string]string{"store": "memstore", "op": "session.load", "outcome": "not_found"}, 1},
	} {
		if got := tl.Observations(t, "tenure.store.duration", c.attr); got != c.want {
			t.Errorf("tenure.store.duration %v = %d observations, want %d", c.attr, got, c.want)
		}
	}
	for _, v := range tl.AttributeValues(t) {
		if strings.Contains(v, "secret") || strings.Contains(v, g.Token) && g.Token != "" || slices.Contains([]string{adminTok, rec.ID}, v) {
			t.Errorf("attribute value %q names a key, user, token or session", v)
		}
	}
}

// TestAPIMetricsLimitNamesBounded: limit names come from clients, so the
// limit attribute takes a bounded number of values.
func TestAPIMetricsLimitNamesBounded(t *testing.T) {
	tl, e := meteredEnv(t)
	for i := range 100 {
		lim := serveapi.Limit{Name: "limit-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Rate: 5, Period: serveapi.Duration(time.Minute)}
		if code, b, _ := e.do(t, adminTok, "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "k", Limit: &lim}}}); code != http.StatusOK {
			t.Fatalf("allow: %d %s", code, b)
		}
	}
	names := map[string]bool{}
	for _, s := range tl.AttributeSets(t)["tenure.ratelimit.decisions"] {
		if v, ok := s.Value("limit"); ok {
			names[v.AsString()] = true
		}
	}
	if len(names) > 65 || !names["other"] {
		t.Fatalf("%d limit names recorded (other: %v), want at most 65 with other", len(names), names["other"])
	}
	if got := tl.Count(t, "tenure.ratelimit.decisions", map[string]string{"decision": "allowed"}); got != 100 {
		t.Fatalf("%d decisions counted, want 100", got)
	}
}

// TestAccessLogModes: full logs every request, sampled one in N (the
// first among them), off none; a bad mode is refused.
func TestAccessLogModes(t *testing.T) {
	for _, c := range []struct {
		mode   server.AccessLog
		sample int
		want   int
	}{
		{server.AccessLogFull, 0, 10},
		{server.AccessLogSampled, 4, 3}, // requests 1, 5 and 9
		{server.AccessLogOff, 0, 0},
	} {
		logs := &syncBuf{}
		_, st := memStores(t)
		srv, err := server.New(st, &server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(logs, nil)),
			AccessLog: c.mode, AccessLogSample: c.sample})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		e := &env{srv: srv, url: hs.URL}
		for range 10 {
			if code, b, _ := e.do(t, adminTok, "GET", "/v1/leases/inspect?key=k", nil); code != http.StatusOK {
				t.Fatalf("inspect: %d %s", code, b)
			}
		}
		hs.Close()
		if got := strings.Count(logs.String(), "msg=request"); got != c.want {
			t.Errorf("mode %d sample %d: %d request lines, want %d:\n%s", c.mode, c.sample, got, c.want, logs.String())
		}
	}
	for _, m := range []string{"full", "sampled", "off"} {
		if _, err := server.ParseAccessLog(m); err != nil {
			t.Errorf("ParseAccessLog(%q): %v", m, err)
		}
	}
	if _, err := server.ParseAccessLog("verbose"); err == nil {
		t.Error("ParseAccessLog(verbose) accepted")
	}
	_, st := memStores(t)
	if _, err := server.New(st, &server.Options{AccessLog: 7}); err == nil {
		t.Error("AccessLog 7 accepted")
	}
}
