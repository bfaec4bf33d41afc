package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	ratedriver "github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/store/memstore"
)

const (
	adminTok  = "admin-token-0123456789"
	billTok   = "billing-token-0123456789"
	readerTok = "reader-token-0123456789"
)

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type fencedMem struct{ s *memstore.Store }

func (f fencedMem) FencedWrite(ctx context.Context, name string, fence uint64, v []byte) error {
	return f.s.FencedSet(ctx, name, fence, v)
}
func (f fencedMem) HolderWrite(ctx context.Context, l *lease.Lease, name string, v []byte) error {
	return f.s.HolderSet(ctx, l, name, v)
}
func (f fencedMem) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	return f.s.FencedGet(ctx, name)
}

type env struct {
	mem  *memstore.Store
	sv   server.SessionKV
	srv  *server.Server
	url  string
	logs *syncBuf
}

func testConfig() *server.Config {
	return &server.Config{
		Rate: -1,
		Tokens: []server.Token{
			{Name: "admin", Secret: secret.New(adminTok), Prefixes: []string{""}, Operations: []string{"*"}},
			{Name: "billing", Secret: secret.New(billTok), Prefixes: []string{"billing/"}, Operations: []string{"*"}},
			{Name: "reader", Secret: secret.New(readerTok), Prefixes: []string{""}, Operations: []string{"read"}},
		},
	}
}

// newEnv is a server over every view of a memory store, with cfg
// (default testConfig) and a /metrics handler.
func newEnv(t *testing.T, cfg *server.Config) *env {
	t.Helper()
	if cfg == nil {
		cfg = testConfig()
	}
	m, st := memStores(t)
	logs := &syncBuf{}
	srv, err := server.New(st, &server.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "# metrics\n") })})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &env{mem: m, sv: st.SessionValues, srv: srv, url: hs.URL, logs: logs}
}

// do sends a request and returns the status and body.
func (e *env) do(t *testing.T, tok, method, path string, body any) (int, []byte, http.Header) {
	t.Helper()
	st, b, h, err := e.send(t.Context(), tok, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return st, b, h
}

// send sends a request (a string body as it is, another as JSON) and
// returns the status, body and headers.
func (e *env) send(ctx context.Context, tok, method, path string, body any) (int, []byte, http.Header, error) {
	var r io.Reader
	if s, ok := body.(string); ok {
		r = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

func problem(t *testing.T, status int, b []byte, h http.Header, wantStatus int, wantType string) serveapi.Problem {
	t.Helper()
	var p serveapi.Problem
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, b)
	}
	if ct := h.Get("Content-Type"); ct != serveapi.ProblemContentType {
		t.Fatalf("content type %q, want %s", ct, serveapi.ProblemContentType)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != wantType || p.Status != wantStatus {
		t.Fatalf("problem %+v, want type %s", p, wantType)
	}
	return p
}

func TestAuth(t *testing.T) {
	e := newEnv(t, nil)
	acq := serveapi.AcquireLease{Key: "billing/k", TTL: serveapi.Duration(time.Minute)}
	st, b, h := e.do(t, "", "POST", "/v1/leases/acquire", acq)
	problem(t, st, b, h, 401, serveapi.TypeUnauthorized)
	if h.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	st, b, h = e.do(t, adminTok+"x", "POST", "/v1/leases/acquire", acq)
	problem(t, st, b, h, 401, serveapi.TypeUnauthorized)
	// Outside the namespace: 403, and nothing written.
	st, b, h = e.do(t, billTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "orders/k", TTL: serveapi.Duration(time.Minute)})
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
	if info, _ := e.mem.Leases().Inspect(t.Context(), "orders/k"); info.Fence != 0 {
		t.Errorf("forbidden acquire wrote %+v", info)
	}
	// An operation the token does not have: 403.
	st, b, h = e.do(t, readerTok, "POST", "/v1/leases/acquire", acq)
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
	st, _, _ = e.do(t, readerTok, "GET", "/v1/leases/inspect?key=billing/k", nil)
	if st != 200 {
		t.Errorf("reader inspect: %d", st)
	}
	// Inside the namespace: granted.
	st, b, _ = e.do(t, billTok, "POST", "/v1/leases/acquire", acq)
	if st != 200 {
		t.Fatalf("acquire: %d %s", st, b)
	}
	var g serveapi.LeaseGrant
	json.Unmarshal(b, &g)
	if g.Token == "" || g.Fence == 0 {
		t.Fatalf("grant %+v", g)
	}
	// Neither bearer tokens nor the lease token are logged.
	logs := e.logs.String()
	for _, s := range []string{adminTok, billTok, readerTok, g.Token} {
		if strings.Contains(logs, s) {
			t.Fatalf("a token appears in the logs:\n%s", logs)
		}
	}
	if !strings.Contains(logs, "token=billing") {
		t.Errorf("logs do not name the token:\n%s", logs)
	}
}

func TestUnauthenticatedEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	for _, p := range []string{"/healthz", "/readyz", "/", "/ui/", "/v1/openapi.json"} {
		if st, b, _ := e.do(t, "", "GET", p, nil); st != 200 {
			t.Errorf("GET %s: %d %s", p, st, b)
		}
	}
	_, b, _ := e.do(t, "", "GET", "/", nil)
	if !strings.Contains(string(b), "/v1/openapi.json") {
		t.Errorf("placeholder page does not link the API description: %s", b)
	}
	st, b, h := e.do(t, adminTok, "GET", "/v1/nothing", nil)
	problem(t, st, b, h, 404, serveapi.TypeNotFound)
}

// /healthz prints "ok", then Options.Version when it is set.
func TestHealthzVersion(t *testing.T) {
	for _, c := range []struct{ version, want string }{
		{"", "ok\n"},
		{"tenure v0.4.0 (schema 5, scripts 4f6e969e1404)", "ok tenure v0.4.0 (schema 5, scripts 4f6e969e1404)\n"},
	} {
		_, st := memStores(t)
		srv, err := server.New(st, &server.Options{Version: c.version, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != 200 || rec.Body.String() != c.want || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("Version %q: %d %q (%s), want 200 %q", c.version, rec.Code, rec.Body, rec.Header().Get("Content-Type"), c.want)
		}
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	e := newEnv(t, nil)
	cases := []struct {
		name, path string
		body       any
	}{
		{"no body", "/v1/leases/acquire", ""},
		{"not JSON", "/v1/leases/acquire", "{"},
		{"unknown field", "/v1/leases/acquire", `{"key":"a","ttl":"1s","bogus":1}`},
		{"trailing data", "/v1/leases/acquire", `{"key":"a","ttl":"1s"} {}`},
		{"bad duration", "/v1/leases/acquire", `{"key":"a","ttl":"soon"}`},
		{"zero ttl", "/v1/leases/acquire", `{"key":"a"}`},
		{"ttl too long", "/v1/leases/acquire", `{"key":"a","ttl":"100h"}`},
		{"empty key", "/v1/leases/acquire", `{"key":"","ttl":"1s"}`},
		{"wait too long", "/v1/leases/acquire", `{"key":"a","ttl":"1s","wait":"1h"}`},
		{"bad token", "/v1/leases/acquire", `{"key":"a","ttl":"1s","token":"has space"}`},
		{"fenced zero fence", "/v1/fenced/write", `{"name":"a","fence":0,"value":"x"}`},
		{"fenced two values", "/v1/fenced/write", `{"name":"a","fence":1,"value":"x","value_base64":"eA=="}`},
		{"rate no requests", "/v1/rate/allow", `{"requests":[]}`},
		{"rate bad algorithm", "/v1/rate/allow", `{"requests":[{"key":"a","algorithm":"leaky","limit":{"rate":1,"period":"1s"}}]}`},
		{"rate zero rate", "/v1/rate/allow", `{"requests":[{"key":"a","limit":{"rate":0,"period":"1s"}}]}`},
		{"rate cost over", "/v1/rate/allow", `{"requests":[{"key":"a","limit":{"rate":1,"period":"1s"},"n":2}]}`},
		{"session bad user", "/v1/sessions", `{"user_id":"","idle":"1m","absolute":"1h"}`},
		{"session bad idle", "/v1/sessions", `{"user_id":"u","idle":"0s","absolute":"1h"}`},
		{"idem bad key", "/v1/idempotency/begin", `{"scope":"s","key":"","fingerprint":"f","token":"t","claim_ttl":"1s","retention":"1h"}`},
	}
	for _, c := range cases {
		st, b, h := e.do(t, adminTok, "POST", c.path, c.body)
		p := problem(t, st, b, h, 400, serveapi.TypeInvalid)
		if p.Detail == "" {
			t.Errorf("%s: no reason given", c.name)
		}
	}
	if info, _ := e.mem.Leases().Inspect(t.Context(), "a"); info.Fence != 0 {
		t.Errorf("bad input wrote a lease: %+v", info)
	}
	if _, f, _ := e.mem.FencedGet(t.Context(), "a"); f != 0 {
		t.Errorf("bad input wrote a fenced value at %d", f)
	}
	if recs, _ := e.mem.Sessions().List(t.Context(), "u"); len(recs) != 0 {
		t.Errorf("bad input created sessions: %v", recs)
	}
}

func TestBodyLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBodyBytes = 1024
	e := newEnv(t, cfg)
	big := `{"name":"a","fence":1,"value":"` + strings.Repeat("x", 2048) + `"}`
	st, b, h := e.do(t, adminTok, "POST", "/v1/fenced/write", big)
	problem(t, st, b, h, 413, serveapi.TypeTooLarge)
	if _, f, _ := e.mem.FencedGet(t.Context(), "a"); f != 0 {
		t.Error("an oversized body was written")
	}
}

func TestAPIRateLimitPerToken(t *testing.T) {
	cfg := testConfig()
	cfg.Rate, cfg.Period = 2, time.Hour
	e := newEnv(t, cfg)
	for i := range 2 {
		if st, b, _ := e.do(t, adminTok, "GET", "/v1/leases/inspect?key=a", nil); st != 200 {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
	}
	st, b, h := e.do(t, adminTok, "GET", "/v1/leases/inspect?key=a", nil)
	problem(t, st, b, h, 429, serveapi.TypeRateLimited)
	if h.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Another token has its own budget.
	if st, _, _ := e.do(t, readerTok, "GET", "/v1/leases/inspect?key=a", nil); st != 200 {
		t.Errorf("another token limited too: %d", st)
	}
}

func TestProblemTypes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.mem.Leases().Acquire(ctx, "k", "holder-token", time.Minute); err != nil {
		t.Fatal(err)
	}
	st, b, h := e.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Second)})
	p := problem(t, st, b, h, 409, serveapi.TypeHeld)
	if p.TTL <= 0 || h.Get("Retry-After") == "" {
		t.Errorf("held without the holder's TTL: %+v", p)
	}
	st, b, h = e.do(t, adminTok, "POST", "/v1/leases/renew", serveapi.LeaseToken{Key: "k", Token: "other-token", TTL: serveapi.Duration(time.Second)})
	problem(t, st, b, h, 409, serveapi.TypeNotHeld)
	st, b, h = e.do(t, adminTok, "POST", "/v1/leases/release", serveapi.LeaseToken{Key: "k", Token: "other-token"})
	problem(t, st, b, h, 409, serveapi.TypeNotHeld)
	if st, b, _ = e.do(t, adminTok, "POST", "/v1/fenced/write", serveapi.FencedWrite{Name: "r", Fence: 5, Value: "a"}); st != 204 {
		t.Fatalf("fenced write: %d %s", st, b)
	}
	st, b, h = e.do(t, adminTok, "POST", "/v1/fenced/write", serveapi.FencedWrite{Name: "r", Fence: 4, Value: "b"})
	p = problem(t, st, b, h, 409, serveapi.TypeStale)
	if p.Fence != 4 || p.Current != 5 {
		t.Errorf("stale problem %+v", p)
	}
	st, b, _ = e.do(t, adminTok, "GET", "/v1/fenced/read?name=r", nil)
	var v serveapi.FencedValue
	json.Unmarshal(b, &v)
	if st != 200 || v.Value != "a" || v.Fence != 5 {
		t.Errorf("fenced read %d %+v", st, v)
	}
	st, b, h = e.do(t, adminTok, "POST", "/v1/sessions/load", serveapi.SessionRef{ID: strings.Repeat("ab", 34)})
	problem(t, st, b, h, 404, serveapi.TypeNotFound)
}

func TestAcquireLongPoll(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.mem.Leases().Acquire(ctx, "k", "holder-token", 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	st, b, _ := e.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(10 * time.Second)})
	if st != 200 {
		t.Fatalf("long poll: %d %s", st, b)
	}
	var g serveapi.LeaseGrant
	json.Unmarshal(b, &g)
	info, _ := e.mem.Leases().Inspect(ctx, "k")
	if !info.Held || info.Fence != g.Fence {
		t.Fatalf("store %+v after grant %+v", info, g)
	}
	// Drain ends a waiting acquire at once: once it is observably waiting
	// (the server says so, and the key is still held by the grant above),
	// Drain makes it answer held with the drain's note.
	waits := make(chan struct{}, 4)
	e.srv.SetOnWait(func() { waits <- struct{}{} })
	type answer struct {
		status int
		body   []byte
		h      http.Header
		err    error
	}
	done := make(chan answer, 1)
	wait := serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(25 * time.Second)}
	go func() {
		st, b, h, err := e.send(ctx, adminTok, "POST", "/v1/leases/acquire", wait)
		done <- answer{st, b, h, err}
	}()
	select {
	case <-waits:
	case a := <-done:
		t.Fatalf("the acquire answered without waiting: %d %s %v", a.status, a.body, a.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the acquire did not start to wait")
	}
	if info, _ := e.mem.Leases().Inspect(ctx, "k"); !info.Held || info.Fence != g.Fence {
		t.Fatalf("store %+v while the acquire waits, want the grant %+v", info, g)
	}
	e.srv.Drain()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatal(a.err)
		}
		p := problem(t, a.status, a.body, a.h, 409, serveapi.TypeHeld)
		if !strings.HasSuffix(p.Detail, "("+server.DrainedNote+")") || p.TTL <= 0 {
			t.Errorf("drained acquire answered %+v, want held with the drain's note", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not end the long poll")
	}
	// An acquire that comes after Drain does not wait: it answers held at
	// once, as one without a wait would, without the drain's note.
	st, b, h := e.do(t, adminTok, "POST", "/v1/leases/acquire", wait)
	p := problem(t, st, b, h, 409, serveapi.TypeHeld)
	if strings.Contains(p.Detail, server.DrainedNote) {
		t.Errorf("an acquire after Drain answered %+v, as if it had waited", p)
	}
	if len(waits) != 0 {
		t.Error("an acquire after Drain waited")
	}
	if info, _ := e.mem.Leases().Inspect(ctx, "k"); !info.Held || info.Fence != g.Fence {
		t.Errorf("store %+v after Drain, want the grant %+v", info, g)
	}
}

func TestListLeases(t *testing.T) {
	e := newEnv(t, nil)
	for _, k := range []string{"billing/a", "billing/b", "billing/c", "orders/x"} {
		if _, err := e.mem.Leases().Acquire(t.Context(), k, lease.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	st, b, _ := e.do(t, billTok, "GET", "/v1/leases?prefix=billing/&limit=2", nil)
	var l serveapi.LeaseList
	json.Unmarshal(b, &l)
	if st != 200 || len(l.Leases) != 2 || l.Leases[0].Key != "billing/a" || l.Next != "billing/b" || !l.Leases[0].Held {
		t.Fatalf("page 1: %d %s", st, b)
	}
	st, b, _ = e.do(t, billTok, "GET", "/v1/leases?prefix=billing/&limit=2&after="+l.Next, nil)
	l = serveapi.LeaseList{}
	json.Unmarshal(b, &l)
	if st != 200 || len(l.Leases) != 1 || l.Leases[0].Key != "billing/c" || l.Next != "" {
		t.Fatalf("page 2: %d %s", st, b)
	}
	st, b, h := e.do(t, billTok, "GET", "/v1/leases", nil)
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
}

func TestConfig(t *testing.T) {
	good := `{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":[""],"operations":["*"]}],"max_wait":"5s","rate_limit":{"rate":10,"period":"1s"}}`
	c, err := server.ParseConfig([]byte(good), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxWait != 5*time.Second || c.Rate != 10 || len(c.Tokens) != 1 {
		t.Fatalf("config %+v", c)
	}
	// The limits the dashboard offers, with their defaults filled in.
	c, err = server.ParseConfig([]byte(`{"limits":[{"name":"api","rate":100,"period":"1m","description":"public API"},`+
		`{"name":"exports","algorithm":"sliding-window","rate":5,"period":"1h"}]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Limits) != 2 || c.Limits[0] != (server.LimitInfo{Name: "api", Algorithm: "gcra", Rate: 100, Period: time.Minute, Burst: 100, Description: "public API"}) ||
		c.Limits[1].Algorithm != "sliding-window" || c.Limits[1].Period != time.Hour {
		t.Fatalf("limits %+v", c.Limits)
	}
	bad := []string{
		`{"limits":[{"rate":1,"period":"1s"}]}`,
		`{"limits":[{"name":"a","rate":1,"period":"1s"},{"name":"a","rate":2,"period":"1s"}]}`,
		`{"limits":[{"name":"a","algorithm":"leaky","rate":1,"period":"1s"}]}`,
		`{"limits":[{"name":"a","rate":0,"period":"1s"}]}`,
		`{"tokens":[{"name":"a","token":"short","prefixes":[""],"operations":["*"]}]}`,
		`{"tokens":[{"name":"a","token":"0123456789abcdef0","operations":["*"]}]}`,
		`{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":[""]}]}`,
		`{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":[""],"operations":["nope"]}]}`,
		`{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":[""],"operations":["*"]},{"name":"b","token":"0123456789abcdef0","prefixes":[""],"operations":["*"]}]}`,
		`{"max_wait":"1m","timeouts":{"write":"30s"}}`,
		`{"unknown":1}`,
	}
	for _, b := range bad {
		_, err := server.ParseConfig([]byte(b), t.TempDir())
		if err == nil {
			t.Errorf("accepted %s", b)
			continue
		}
		if strings.Contains(err.Error(), "0123456789abcdef0") {
			t.Errorf("error shows a token: %v", err)
		}
	}
}

// downLeases is a lease store whose Inspect fails as a store that cannot
// be reached does, with the text a driver gives (address, user,
// database).
type downLeases struct{ lease.Store }

func (downLeases) Inspect(context.Context, string) (lease.Info, error) {
	return lease.Info{}, fmt.Errorf("%w: dial tcp 10.9.8.7:5432: connect: connection refused (user app, database billing)", lease.ErrUnavailable)
}

// TestStoreErrorLoggedNotAnswered: a store's error text stays in the
// server's log, under the request's ID; the problem names that ID (and
// so does X-Request-Id) and says nothing of the store's address.
func TestStoreErrorLoggedNotAnswered(t *testing.T) {
	m, st := memStores(t)
	st.Leases = downLeases{m.Leases()}
	logs := &syncBuf{}
	srv, err := server.New(st, &server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{url: hs.URL, logs: logs}
	status, b, h := e.do(t, adminTok, "GET", "/v1/leases/inspect?key=a", nil)
	p := problem(t, status, b, h, http.StatusServiceUnavailable, serveapi.TypeUnavailable)
	id := h.Get("X-Request-Id")
	if id == "" || p.Instance != "urn:tenure:request:"+id || !strings.Contains(p.Detail, id) {
		t.Fatalf("problem %+v, X-Request-Id %q: want the request's ID in instance and detail", p, id)
	}
	for _, leak := range []string{"10.9.8.7", "billing", "connection refused"} {
		if strings.Contains(string(b), leak) {
			t.Errorf("the answer shows %q: %s", leak, b)
		}
	}
	line := ""
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "request_id="+id) {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "10.9.8.7") {
		t.Fatalf("no warning with the cause under request %s in the log:\n%s", id, logs.String())
	}
	// An answer the server makes itself keeps its detail.
	status, b, h = e.do(t, adminTok, "POST", "/v1/leases/acquire", "{")
	if p := problem(t, status, b, h, http.StatusBadRequest, serveapi.TypeInvalid); p.Instance != "" || p.Detail == "" {
		t.Errorf("a bad input's problem: %+v", p)
	}
}

// TestNamespaceIsAPathSegment: a namespace without a trailing separator
// holds the key itself and keys that continue it after "/", ":" or ".",
// not keys that merely start with its letters, also in a list.
func TestNamespaceIsAPathSegment(t *testing.T) {
	for _, c := range []struct {
		key, ns string
		in      bool
	}{
		{"billing/42", "billing", true}, {"billing", "billing", true}, {"billing:42", "billing", true},
		{"billing.x", "billing", true}, {"billing-internal/42", "billing", false}, {"billingx", "billing", false},
		{"billing/42", "billing/", true}, {"billing-internal/42", "billing/", false}, {"anything", "", true},
		{"bill", "billing", false},
	} {
		if got := server.InNamespace(c.key, c.ns); got != c.in {
			t.Errorf("InNamespace(%q, %q) = %v, want %v", c.key, c.ns, got, c.in)
		}
	}
	const nsTok = "namespace-token-0123456789"
	cfg := testConfig()
	cfg.Tokens = append(cfg.Tokens, server.Token{Name: "ns", Secret: secret.New(nsTok), Prefixes: []string{"billing"}, Operations: []string{"*"}})
	e := newEnv(t, cfg)
	acq := func(tok, key string) int {
		st, _, _ := e.do(t, tok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: key, TTL: serveapi.Duration(time.Minute)})
		return st
	}
	if st := acq(nsTok, "billing/42"); st != http.StatusOK {
		t.Fatalf("acquire billing/42: %d", st)
	}
	if st := acq(nsTok, "billing-internal/42"); st != http.StatusForbidden {
		t.Fatalf("acquire billing-internal/42 with namespace billing: %d, want 403", st)
	}
	if st := acq(adminTok, "billing-internal/42"); st != http.StatusOK {
		t.Fatalf("admin acquire: %d", st)
	}
	st, b, _ := e.do(t, nsTok, "GET", "/v1/leases?prefix=billing", nil)
	var l serveapi.LeaseList
	if err := json.Unmarshal(b, &l); st != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s", st, b)
	}
	if len(l.Leases) != 1 || l.Leases[0].Key != "billing/42" {
		t.Fatalf("list under namespace billing: %+v, want billing/42 only", l.Leases)
	}
}

// TestRateStateKeyValidated: a state key given in a request is checked
// (group, name, kind, key) before anything is decided or written.
func TestRateStateKeyValidated(t *testing.T) {
	e := newEnv(t, nil)
	lim := serveapi.Limit{Name: "api", Rate: 10, Period: serveapi.Duration(time.Minute), Burst: 10}
	for _, k := range []serveapi.StateKey{
		{Group: "a b", Name: "api", Kind: "g", Key: "k"},
		{Name: "api:x", Kind: "g", Key: "k"},
		{Name: "api", Kind: "x", Key: "k"},
		{Name: "api", Kind: "p", Key: "k"},
		{Name: "api", Kind: "g", Key: ""},
	} {
		st, b, h := e.do(t, adminTok, "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{State: &k, Limit: &lim}}})
		problem(t, st, b, h, http.StatusBadRequest, serveapi.TypeInvalid)
		st, b, h = e.do(t, adminTok, "POST", "/v1/rate/reset", serveapi.RateReset{Requests: []serveapi.RateRequest{{State: &k}}})
		problem(t, st, b, h, http.StatusBadRequest, serveapi.TypeInvalid)
	}
	gk := serveapi.StateKey{Name: "conc", Kind: "g", Key: "k"}
	st, b, h := e.do(t, adminTok, "POST", "/v1/permits/acquire", serveapi.Permit{State: &gk, Permits: 2, TTL: serveapi.Duration(time.Minute)})
	problem(t, st, b, h, http.StatusBadRequest, serveapi.TypeInvalid)
	if ttl, ok, err := e.mem.LimitTTL(t.Context(), ratedriver.StateKey{Name: "conc", Kind: "g", Key: "k"}); err != nil || ok {
		t.Fatalf("a refused permit left state: ttl %v, %v, %v", ttl, ok, err)
	}
	// A valid one is accepted.
	ok := serveapi.StateKey{Name: "api", Kind: "g", Key: "k"}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{State: &ok, Limit: &lim}}}); st != http.StatusOK {
		t.Fatalf("a valid state key: %d %s", st, b)
	}
}

// TestRateDecisionHeaders: allowRate's answer carries the fields the Go
// middleware sends: RateLimit-Policy and RateLimit always, Retry-After
// when the limits deny.
func TestRateDecisionHeaders(t *testing.T) {
	e := newEnv(t, nil)
	body := serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "user-42", Limit: &serveapi.Limit{Name: "api", Rate: 2, Period: serveapi.Duration(time.Minute)}}}}
	for i, want := range []bool{true, true, false} {
		st, b, h := e.do(t, adminTok, "POST", "/v1/rate/allow", body)
		var d serveapi.RateDecisions
		if err := json.Unmarshal(b, &d); st != http.StatusOK || err != nil || d.Allowed != want {
			t.Fatalf("decision %d: %d %s, want allowed %v", i, st, b, want)
		}
		if got := h.Get("RateLimit-Policy"); got != `"api";q=2;w=60` {
			t.Errorf("decision %d: RateLimit-Policy %q", i, got)
		}
		if got := h.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"api";r=%d`, max(1-i, 0))) {
			t.Errorf("decision %d: RateLimit %q", i, got)
		}
		ra := h.Get("Retry-After")
		if want && ra != "" {
			t.Errorf("decision %d allowed, with Retry-After %q", i, ra)
		}
		if !want {
			if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 60 {
				t.Errorf("denied decision: Retry-After %q, want 1 to 60 seconds", ra)
			}
		}
	}
}

// TestIdempotencyAPIDefaults: begin needs only scope and key (the server
// makes the token and uses the Keeper's defaults), computes the Go
// middleware's fingerprint from request, so that a Go service and a
// client of the API share keys, and answers a mismatch and a live claim
// with the problems of the error table.
func TestIdempotencyAPIDefaults(t *testing.T) {
	e := newEnv(t, nil)
	// A Go service records a charge through the middleware.
	k, err := idempotency.New(e.mem.Idempotency(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := k.Middleware(&idempotency.HTTPOptions{Principal: func(*http.Request) string { return "billing" }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charged":1200}`)
	})))
	req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1200}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "order-1234")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("the middleware answered %d", rec.Code)
	}
	scope := "7:billing POST /charges"
	same := &serveapi.IdemRequest{Method: "POST", URI: "/charges", ContentType: "application/json", Body: []byte(`{"amount":1200}`)}
	st, b, _ := e.do(t, adminTok, "POST", "/v1/idempotency/begin", serveapi.IdemBegin{Scope: scope, Key: "order-1234", Request: same})
	var got serveapi.IdemBegun
	if err := json.Unmarshal(b, &got); st != 200 || err != nil || got.State != "completed" || got.Outcome == nil {
		t.Fatalf("begin with the Go service's request: %d %s, want its recorded outcome", st, b)
	}
	if want := idempotency.Fingerprint([]byte("POST"), []byte("/charges"), []byte("application/json"), []byte(`{"amount":1200}`)); got.Fingerprint != want {
		t.Errorf("fingerprint %q, want %q", got.Fingerprint, want)
	}
	other := *same
	other.Body = []byte(`{"amount":9999}`)
	st, b, h := e.do(t, adminTok, "POST", "/v1/idempotency/begin", serveapi.IdemBegin{Scope: scope, Key: "order-1234", Request: &other})
	problem(t, st, b, h, http.StatusUnprocessableEntity, serveapi.TypeMismatch)

	// A new key with defaults: the server makes the token.
	st, b, _ = e.do(t, adminTok, "POST", "/v1/idempotency/begin", serveapi.IdemBegin{Scope: "api", Key: "k1"})
	got = serveapi.IdemBegun{}
	if err := json.Unmarshal(b, &got); st != 200 || err != nil || got.State != "claimed" || got.Token == "" || got.TTL.D() != 30*time.Second {
		t.Fatalf("begin with defaults: %d %s", st, b)
	}
	st, b, h = e.do(t, adminTok, "POST", "/v1/idempotency/begin", serveapi.IdemBegin{Scope: "api", Key: "k1"})
	if p := problem(t, st, b, h, http.StatusConflict, serveapi.TypeInProgress); p.TTL <= 0 || h.Get("Retry-After") == "" {
		t.Errorf("a live claim: %+v, Retry-After %q", p, h.Get("Retry-After"))
	}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/idempotency/complete", serveapi.IdemClaim{Scope: "api", Key: "k1", Token: got.Token, Fence: got.Fence,
		Outcome: &serveapi.IdemOutcome{Value: []byte("done")}}); st != http.StatusNoContent {
		t.Fatalf("complete without retention: %d %s", st, b)
	}
	r, err := e.mem.Idempotency().Inspect(t.Context(), idempotency.ID{Scope: "api", Key: "k1"})
	if err != nil || !r.Completed || r.Expires < 23*time.Hour || r.Expires > 24*time.Hour {
		t.Fatalf("the record after complete: %+v, %v; want completed, kept about 24h", r, err)
	}
	if st, b, h := e.do(t, adminTok, "POST", "/v1/idempotency/begin", serveapi.IdemBegin{Scope: "api", Key: "k2", Fingerprint: "f", Request: same}); st != 400 {
		problem(t, st, b, h, http.StatusBadRequest, serveapi.TypeInvalid)
	}
}
