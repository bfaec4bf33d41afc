package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
)

// dashEnv is a server over a memory store with a browser-like client (a
// cookie jar, redirects followed).
type dashEnv struct {
	mem  *memstore.Store
	url  string
	c    *http.Client
	logs *syncBuf
}

func newDash(t *testing.T, opt *server.Options) *dashEnv {
	t.Helper()
	m, st := memStores(t)
	logs := &syncBuf{}
	var o server.Options
	if opt != nil {
		o = *opt
	}
	if o.Config == nil {
		o.Config = testConfig()
	}
	if o.UIRefresh == 0 {
		o.UIRefresh = 100 * time.Millisecond
	}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	srv, err := server.New(st, &o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	jar, _ := cookiejar.New(nil)
	return &dashEnv{mem: m, url: hs.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}, logs: logs}
}

// req sends a request; hdr are extra header pairs.
func (e *dashEnv) req(t *testing.T, method, path string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *dashEnv) login(t *testing.T, tok string) *http.Response {
	t.Helper()
	resp, _ := e.req(t, "POST", "/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()),
		"Content-Type", "application/x-www-form-urlencoded", "Origin", e.url, "Sec-Fetch-Site", "same-origin")
	return resp
}

func (e *dashEnv) postJSON(t *testing.T, path string, v any, hdr ...string) (*http.Response, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	return e.req(t, "POST", path, strings.NewReader(string(b)), append([]string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-origin"}, hdr...)...)
}

func TestDashboardLoginKeepsTokenOnServer(t *testing.T) {
	e := newDash(t, &server.Options{Version: "tenure v0.9.0 (schema 6, scripts 4f6e969e1404)"})
	resp, body := e.req(t, "GET", "/", nil)
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/" || !strings.Contains(body, `name="token"`) {
		t.Fatalf("GET / anonymous: %d at %s: %.200s", resp.StatusCode, resp.Request.URL.Path, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	resp, body = e.req(t, "GET", "/ui/api/me", nil)
	if resp.StatusCode != 401 {
		t.Fatalf("api/me anonymous: %d %s", resp.StatusCode, body)
	}

	// A wrong token: 401, no cookie.
	resp = e.login(t, "wrong-token-0123456789")
	if resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	// The right one: a session cookie that is not the token.
	var setCookie []string
	e.c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		setCookie = append(setCookie, r.Response.Header.Values("Set-Cookie")...)
		return nil
	}
	resp = e.login(t, adminTok)
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/" {
		t.Fatalf("login: %d at %s", resp.StatusCode, resp.Request.URL.Path)
	}
	if len(setCookie) != 1 {
		t.Fatalf("Set-Cookie after login: %q", setCookie)
	}
	sc := setCookie[0]
	for _, want := range []string{server.DashboardCookieName + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(sc, "Secure") || strings.Contains(sc, adminTok) {
		t.Errorf("cookie over plain HTTP: %q", sc)
	}
	_, body = e.req(t, "GET", "/ui/", nil)
	if !strings.Contains(body, "assets/app.js") || !strings.Contains(body, `id="version"`) {
		t.Fatalf("index after login: %.300s", body)
	}
	resp, body = e.req(t, "GET", "/ui/api/me", nil)
	var me struct {
		Token      string          `json:"token"`
		Operations map[string]bool `json:"operations"`
		Features   map[string]bool `json:"features"`
		Version    string          `json:"version"`
	}
	if err := json.Unmarshal([]byte(body), &me); err != nil || resp.StatusCode != 200 {
		t.Fatalf("api/me: %d %s", resp.StatusCode, body)
	}
	if me.Version != "tenure v0.9.0 (schema 6, scripts 4f6e969e1404)" {
		t.Errorf("api/me version = %q, want the server's Options.Version for the footer", me.Version)
	}
	if me.Token != "admin" || !me.Operations["revokeUserSessions"] || !me.Features["listLeases"] || !me.Features["idempotencyAdmin"] {
		t.Errorf("api/me = %+v", me)
	}
	if strings.Contains(body, adminTok) {
		t.Errorf("api/me shows the token: %s", body)
	}
	// The login session is not one of the served store's sessions.
	if recs, err := e.mem.Sessions().List(context.Background(), server.DashboardUserPrefix+"admin"); err != nil || len(recs) != 0 {
		t.Errorf("login session in the served store: %v %v", recs, err)
	}

	// Logout ends it.
	resp, _ = e.req(t, "POST", "/ui/logout", nil, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != 200 || !strings.Contains(resp.Request.URL.Path, "/ui/") {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ = e.req(t, "GET", "/ui/api/me", nil); resp.StatusCode != 401 {
		t.Errorf("api/me after logout: %d", resp.StatusCode)
	}
	logs := e.logs.String()
	if strings.Contains(logs, adminTok) || !strings.Contains(logs, "operation=dashboardLogin") {
		t.Errorf("logs:\n%s", logs)
	}
}

func TestDashboardHTTPSCookie(t *testing.T) {
	e := newDash(t, &server.Options{HTTPS: true})
	e.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp := e.login(t, adminTok)
	sc := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(sc, server.SecureDashboardCookieName+"=") || !strings.Contains(sc, "Secure") {
		t.Fatalf("login over HTTPS: %d %q", resp.StatusCode, sc)
	}
}

func TestDashboardRefusesCrossOrigin(t *testing.T) {
	e := newDash(t, nil)
	// A login form posted from another site sets no cookie.
	resp, _ := e.req(t, "POST", "/ui/login", strings.NewReader("token="+adminTok),
		"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != 403 || len(resp.Cookies()) != 0 {
		t.Fatalf("cross-site login: %d %v", resp.StatusCode, resp.Cookies())
	}
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	ctx := context.Background()
	m, _ := session.New(e.mem.Sessions(), nil)
	if _, _, err := m.Create(ctx, "alice", nil); err != nil {
		t.Fatal(err)
	}
	// A logged-in browser tricked into a cross-site POST changes nothing.
	resp, _ = e.postJSON(t, "/ui/api/sessions/revoke-user", serveapi.UserRef{UserID: "alice"}, "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != 403 {
		t.Fatalf("cross-site revoke: %d", resp.StatusCode)
	}
	if recs, _ := e.mem.Sessions().List(ctx, "alice"); len(recs) != 1 {
		t.Fatalf("alice has %d sessions after a refused revoke", len(recs))
	}
	resp, body := e.postJSON(t, "/ui/api/sessions/revoke-user", serveapi.UserRef{UserID: "alice"})
	if resp.StatusCode != 200 || !strings.Contains(body, `"removed":1`) {
		t.Fatalf("same-origin revoke: %d %s", resp.StatusCode, body)
	}
	if recs, _ := e.mem.Sessions().List(ctx, "alice"); len(recs) != 0 {
		t.Fatalf("alice has %d sessions after revoke", len(recs))
	}
}

func TestDashboardLoginAttemptsLimited(t *testing.T) {
	e := newDash(t, nil)
	for i := range 10 {
		if st := e.login(t, "wrong-token-0123456789").StatusCode; st != 401 {
			t.Fatalf("attempt %d: %d", i, st)
		}
	}
	resp := e.login(t, adminTok)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || len(resp.Cookies()) != 0 {
		t.Fatalf("11th attempt: %d", resp.StatusCode)
	}
}

// event reads the next server-sent event.
func event(t *testing.T, rd *bufio.Reader) (name, data string) {
	t.Helper()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

// stream opens the event stream with query q.
func (e *dashEnv) stream(t *testing.T, q url.Values) (*bufio.Reader, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/ui/api/events?"+q.Encode(), nil)
	resp, err := e.c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	return bufio.NewReader(resp.Body), func() { cancel(); resp.Body.Close() }
}

type panelT struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

type snapT struct {
	Now         time.Time         `json:"now"`
	Leases      *panelT           `json:"leases"`
	Elections   *panelT           `json:"elections"`
	Watched     map[string]panelT `json:"watched"`
	Sessions    *panelT           `json:"sessions"`
	Slots       *panelT           `json:"slots"`
	Limits      *panelT           `json:"limits"`
	Idempotency *panelT           `json:"idempotency"`
}

func TestDashboardEvents(t *testing.T) {
	e := newDash(t, nil)
	ctx := context.Background()
	g, err := e.mem.Leases().Acquire(ctx, "jobs/nightly", "holder-token-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.New(e.mem.Leases(), "settlement", &election.Options{Holder: "worker-7"})
	if err != nil {
		t.Fatal(err)
	}
	term, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	m, _ := session.New(e.mem.Sessions(), nil)
	for range 2 {
		if _, _, err := m.Create(ctx, "alice", map[string]string{"cart": "private-cart-value"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.mem.Idempotency().Begin(ctx, driver.Begin{ID: idempotency.ID{Scope: "pay", Key: "k1"},
		Fingerprint: "f", Token: secret.New("claim-token-0123456789"), ClaimTTL: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	lim, _ := json.Marshal(serveapi.RateRequest{Key: "user-42", Limit: &serveapi.Limit{Name: "api", Rate: 5, Period: serveapi.Duration(time.Minute)}})
	rd, stop := e.stream(t, url.Values{"prefix": {"jobs/"}, "key": {"other/key"}, "user": {"alice"}, "job": {"nightly"}, "limit": {string(lim)}})
	defer stop()

	var remaining []int
	for i := range 2 {
		name, data := event(t, rd)
		if name != "snapshot" {
			t.Fatalf("event %q", name)
		}
		if strings.Contains(data, "private-cart-value") || strings.Contains(data, "holder-token-1") || strings.Contains(data, "claim-token") {
			t.Fatalf("a snapshot shows session data or a token: %s", data)
		}
		var s snapT
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatal(err)
		}
		var ll serveapi.LeaseList
		json.Unmarshal(s.Leases.Body, &ll)
		if s.Leases.Status != 200 || len(ll.Leases) != 1 || ll.Leases[0].Key != "jobs/nightly" || ll.Leases[0].Fence != g.Fence || !ll.Leases[0].Held {
			t.Fatalf("leases panel: %d %s", s.Leases.Status, s.Leases.Body)
		}
		var el serveapi.LeaseList
		json.Unmarshal(s.Elections.Body, &el)
		if s.Elections.Status != 200 || len(el.Leases) != 1 || el.Leases[0].Key != "election/settlement" ||
			el.Leases[0].Holder != "worker-7" || el.Leases[0].Fence != term.Fence() || !el.Leases[0].Held {
			t.Fatalf("elections panel: %d %s", s.Elections.Status, s.Elections.Body)
		}
		if strings.Contains(string(s.Elections.Body), term.Lease().Token().Reveal()) {
			t.Fatalf("the elections panel shows the term's token: %s", s.Elections.Body)
		}
		if w := s.Watched["other/key"]; w.Status != 200 || !strings.Contains(string(w.Body), `"held":false`) {
			t.Errorf("watched key: %d %s", w.Status, w.Body)
		}
		var sl serveapi.SessionList
		json.Unmarshal(s.Sessions.Body, &sl)
		if s.Sessions.Status != 200 || len(sl.Sessions) != 2 || strings.Contains(string(s.Sessions.Body), `"data"`) {
			t.Fatalf("sessions panel: %d %s", s.Sessions.Status, s.Sessions.Body)
		}
		if s.Slots.Status != 200 || !strings.Contains(string(s.Slots.Body), `"slots":[]`) {
			t.Errorf("slots panel: %d %s", s.Slots.Status, s.Slots.Body)
		}
		var ds serveapi.RateDecisions
		json.Unmarshal(s.Limits.Body, &ds)
		if s.Limits.Status != 200 || len(ds.Decisions) != 1 {
			t.Fatalf("limits panel: %d %s", s.Limits.Status, s.Limits.Body)
		}
		remaining = append(remaining, ds.Decisions[0].Remaining)
		if i == 0 {
			if !strings.Contains(string(s.Idempotency.Body), `"state":"in-progress"`) || !strings.Contains(string(s.Idempotency.Body), `"scope":"pay"`) {
				t.Errorf("idempotency panel: %s", s.Idempotency.Body)
			}
		}
	}
	// Watching a limit peeks: nothing is consumed.
	if remaining[0] != 5 || remaining[1] != 5 {
		t.Errorf("remaining over two snapshots = %v, want [5 5]", remaining)
	}
}

func TestDashboardStreamEndsAtLogout(t *testing.T) {
	e := newDash(t, nil)
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	rd, stop := e.stream(t, url.Values{})
	defer stop()
	if name, _ := event(t, rd); name != "snapshot" {
		t.Fatalf("first event %q", name)
	}
	if resp, _ := e.req(t, "POST", "/ui/logout", nil, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != 200 {
		t.Fatal("logout failed")
	}
	for {
		name, _ := event(t, rd)
		if name == "logout" {
			break
		}
	}
	if _, err := rd.ReadString('\n'); err == nil {
		t.Error("the stream goes on after logout")
	}
}

func TestDashboardHonoursTokenScope(t *testing.T) {
	e := newDash(t, nil)
	ctx := context.Background()
	m, _ := session.New(e.mem.Sessions(), nil)
	m.Create(ctx, "alice", nil)

	// The reader token may list, not revoke.
	if e.login(t, readerTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	resp, body := e.postJSON(t, "/ui/api/sessions/revoke-user", serveapi.UserRef{UserID: "alice"})
	if resp.StatusCode != 403 || !strings.Contains(body, serveapi.TypeForbidden) {
		t.Fatalf("reader revoke: %d %s", resp.StatusCode, body)
	}
	if recs, _ := e.mem.Sessions().List(ctx, "alice"); len(recs) != 1 {
		t.Fatalf("a forbidden revoke removed sessions")
	}
	rd, stop := e.stream(t, url.Values{"user": {"alice"}})
	_, data := event(t, rd)
	stop()
	var s snapT
	json.Unmarshal([]byte(data), &s)
	if s.Sessions.Status != 200 {
		t.Errorf("reader list: %d %s", s.Sessions.Status, s.Sessions.Body)
	}

	// The billing token sees only billing/ keys.
	if e.login(t, billTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	rd, stop = e.stream(t, url.Values{"prefix": {""}, "user": {"alice"}})
	_, data = event(t, rd)
	stop()
	json.Unmarshal([]byte(data), &s)
	if s.Leases.Status != 403 || s.Sessions.Status != 403 {
		t.Errorf("billing outside its namespace: leases %d, sessions %d", s.Leases.Status, s.Sessions.Status)
	}
	resp, _ = e.postJSON(t, "/ui/api/sessions/revoke-user", serveapi.UserRef{UserID: "alice"})
	if resp.StatusCode != 403 {
		t.Errorf("billing revoke of alice: %d", resp.StatusCode)
	}
}

func TestDashboardSettlesIdempotencyRecords(t *testing.T) {
	e := newDash(t, nil)
	ctx := context.Background()
	idem := e.mem.Idempotency()
	begin := func(key string) uint64 {
		b, err := idem.Begin(ctx, driver.Begin{ID: idempotency.ID{Scope: "pay", Key: key}, Fingerprint: "f",
			Token: secret.New("claim-token-" + key + "-0123456789"), ClaimTTL: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return b.Fence
	}
	f1, f2 := begin("k1"), begin("k2")
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	// A live claim is refused without force; a stale fence always.
	resp, body := e.postJSON(t, "/ui/api/idempotency/release", map[string]any{"scope": "pay", "key": "k1", "fence": f1})
	if resp.StatusCode != 409 || !strings.Contains(body, serveapi.TypeInProgress) {
		t.Fatalf("release of a live claim: %d %s", resp.StatusCode, body)
	}
	resp, body = e.postJSON(t, "/ui/api/idempotency/release", map[string]any{"scope": "pay", "key": "k1", "fence": f1 + 1, "force": true})
	if resp.StatusCode != 409 || !strings.Contains(body, serveapi.TypeStale) {
		t.Fatalf("release with a stale fence: %d %s", resp.StatusCode, body)
	}
	if r, _ := idem.Inspect(ctx, idempotency.ID{Scope: "pay", Key: "k1"}); !r.Exists || r.Completed {
		t.Fatalf("a refused release changed the record: %+v", r)
	}
	resp, body = e.postJSON(t, "/ui/api/idempotency/release", map[string]any{"scope": "pay", "key": "k1", "fence": f1, "force": true})
	if resp.StatusCode != 204 {
		t.Fatalf("forced release: %d %s", resp.StatusCode, body)
	}
	if r, _ := idem.Inspect(ctx, idempotency.ID{Scope: "pay", Key: "k1"}); r.Exists {
		t.Fatalf("the record is still there after release: %+v", r)
	}
	resp, body = e.postJSON(t, "/ui/api/idempotency/resolve", map[string]any{"scope": "pay", "key": "k2", "fence": f2, "force": true,
		"outcome": map[string]any{"value": []byte("ok")}})
	if resp.StatusCode != 204 {
		t.Fatalf("resolve: %d %s", resp.StatusCode, body)
	}
	if r, _ := idem.Inspect(ctx, idempotency.ID{Scope: "pay", Key: "k2"}); !r.Completed || string(r.Outcome.Value) != "ok" {
		t.Fatalf("after resolve: %+v", r)
	}
	// The billing token may not touch the pay scope.
	if e.login(t, billTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	resp, _ = e.postJSON(t, "/ui/api/idempotency/release", map[string]any{"scope": "pay", "key": "k2", "fence": f2, "force": true})
	if resp.StatusCode != 403 {
		t.Errorf("billing release in pay: %d", resp.StatusCode)
	}
}

// TestDashboardResolveRefusesEmptyResult: a resolve whose result is
// empty is refused with a problem that says so, and nothing is recorded,
// unless the request says allow_empty.
func TestDashboardResolveRefusesEmptyResult(t *testing.T) {
	e := newDash(t, nil)
	ctx := context.Background()
	idem := e.mem.Idempotency()
	id := idempotency.ID{Scope: "pay", Key: "order-7"}
	b, err := idem.Begin(ctx, driver.Begin{ID: id, Fingerprint: "f",
		Token: secret.New("claim-token-order-7-0123456789"), ClaimTTL: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	for _, outcome := range []map[string]any{{}, {"value": []byte{}}, {"value": nil}} {
		resp, body := e.postJSON(t, "/ui/api/idempotency/resolve", map[string]any{"scope": "pay", "key": "order-7", "fence": b.Fence, "force": true,
			"outcome": outcome})
		if resp.StatusCode != 400 || !strings.Contains(body, serveapi.TypeInvalid) || !strings.Contains(body, "allow_empty") {
			t.Fatalf("resolve with an empty result %v: %d %s", outcome, resp.StatusCode, body)
		}
		if r, _ := idem.Inspect(ctx, id); !r.Exists || r.Completed {
			t.Fatalf("a refused resolve changed the record: %+v", r)
		}
	}
	// Asked for, an empty result is recorded.
	resp, body := e.postJSON(t, "/ui/api/idempotency/resolve", map[string]any{"scope": "pay", "key": "order-7", "fence": b.Fence, "force": true,
		"outcome": map[string]any{}, "allow_empty": true})
	if resp.StatusCode != 204 {
		t.Fatalf("resolve with allow_empty: %d %s", resp.StatusCode, body)
	}
	if r, _ := idem.Inspect(ctx, id); !r.Completed || len(r.Outcome.Value) != 0 || r.Outcome.Failed {
		t.Fatalf("after resolve with allow_empty: %+v", r)
	}
}

// TestDashboardDiscover: api/discover offers the jobs, users, limits and
// elections a token may see, bounded to its namespaces and operations,
// with no secret in the answer.
func TestDashboardDiscover(t *testing.T) {
	cfg := testConfig()
	const opsTok = "ops-billing-token-0123456789"
	cfg.Tokens = append(cfg.Tokens, server.Token{Name: "ops-billing", Secret: secret.New(opsTok), Prefixes: []string{"billing"},
		Operations: []string{"slotHistory", "listSessions"}})
	cfg.Limits = []server.LimitInfo{
		{Name: "api", Rate: 100, Period: time.Minute, Description: "public API, per user"},
		{Name: "exports", Algorithm: "gcra", Rate: 5, Period: time.Hour, Burst: 2},
	}
	e := newDash(t, &server.Options{Config: cfg})
	ctx := context.Background()
	claims := e.mem.Schedules().Claims()
	for _, job := range []string{"nightly", "billing.close", "billing-x"} {
		for _, slot := range []string{"s1", "s2"} {
			if _, err := claims.Acquire(ctx, scheddriver.ClaimKey(job, slot), "claim-"+job+slot, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.mem.Schedules().Register(ctx, scheddriver.RegisterRequest{Job: "nightly", Fingerprint: "v1", Spec: "every day at 02:00", Node: "node-a"}); err != nil {
		t.Fatal(err)
	}
	m, _ := session.New(e.mem.Sessions(), nil)
	for _, u := range []string{"alice", "alice", "billing/42", "billing-internal/1"} {
		if _, _, err := m.Create(ctx, u, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.mem.Leases().Acquire(ctx, election.KeyPrefix+"settlement", "term-token-0123456789", time.Minute); err != nil {
		t.Fatal(err)
	}

	resp, _ := e.req(t, "GET", "/ui/api/discover", nil)
	if resp.StatusCode != 401 {
		t.Fatalf("discover without a login: %d", resp.StatusCode)
	}
	type answer struct {
		Jobs struct {
			Items []struct{ Job, Spec, Node string }
			Note  string
		}
		Users struct {
			Items []struct {
				UserID   string `json:"user_id"`
				Sessions int
			}
			Note string
		}
		Limits struct {
			Items []struct {
				Name, Algorithm, Period, Description string
				Rate, Burst                          int
			}
			Note string
		}
		Elections struct {
			Items []struct {
				Name, Key string
				Held      bool
			}
			Note string
		}
	}
	get := func(tok string) (answer, string) {
		t.Helper()
		if e.login(t, tok).StatusCode != 200 {
			t.Fatal("login failed")
		}
		resp, body := e.req(t, "GET", "/ui/api/discover", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("discover: %d %s", resp.StatusCode, body)
		}
		for _, s := range []string{adminTok, billTok, readerTok, opsTok, "claim-", "term-token"} {
			if strings.Contains(body, s) {
				t.Fatalf("a secret (%s) in the discovery: %s", s, body)
			}
		}
		var a answer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatal(err)
		}
		return a, body
	}

	a, body := get(adminTok)
	var jobs, users, limits, elections []string
	for _, j := range a.Jobs.Items {
		jobs = append(jobs, j.Job+"="+j.Spec)
	}
	for _, u := range a.Users.Items {
		users = append(users, u.UserID+"="+strconv.Itoa(u.Sessions))
	}
	for _, l := range a.Limits.Items {
		limits = append(limits, fmt.Sprintf("%s %s %d/%s burst %d", l.Name, l.Algorithm, l.Rate, l.Period, l.Burst))
	}
	for _, el := range a.Elections.Items {
		elections = append(elections, fmt.Sprintf("%s %s %v", el.Name, el.Key, el.Held))
	}
	slices.Sort(users)
	if want := []string{"billing-x=", "billing.close=", "nightly=every day at 02:00"}; !slices.Equal(jobs, want) {
		t.Errorf("admin jobs %q, want %q (%s)", jobs, want, body)
	}
	if want := []string{"alice=2", "billing-internal/1=1", "billing/42=1"}; !slices.Equal(users, want) {
		t.Errorf("admin users %q, want %q", users, want)
	}
	if want := []string{"api gcra 100/1m0s burst 100", "exports gcra 5/1h0m0s burst 2"}; !slices.Equal(limits, want) {
		t.Errorf("admin limits %q, want %q", limits, want)
	}
	if want := []string{"settlement election/settlement true"}; !slices.Equal(elections, want) {
		t.Errorf("admin elections %q, want %q", elections, want)
	}

	// A token of the namespace billing, with two operations: its jobs and
	// users only, and notes for what it may not see.
	a, body = get(opsTok)
	jobs, users = nil, nil
	for _, j := range a.Jobs.Items {
		jobs = append(jobs, j.Job)
	}
	for _, u := range a.Users.Items {
		users = append(users, u.UserID)
	}
	if !slices.Equal(jobs, []string{"billing.close"}) || !slices.Equal(users, []string{"billing/42"}) {
		t.Errorf("ops-billing sees jobs %q and users %q, want billing.close and billing/42 (%s)", jobs, users, body)
	}
	if len(a.Limits.Items) != 0 || !strings.Contains(a.Limits.Note, "allowRate") {
		t.Errorf("ops-billing limits %+v", a.Limits)
	}
	if len(a.Elections.Items) != 0 || !strings.Contains(a.Elections.Note, "listLeases") {
		t.Errorf("ops-billing elections %+v", a.Elections)
	}
}

func TestDashboardPeekConsumesNothing(t *testing.T) {
	e := newDash(t, nil)
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	req := serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "k", Limit: &serveapi.Limit{Name: "n", Rate: 3, Period: serveapi.Duration(time.Minute)}}}}
	for range 5 {
		resp, body := e.postJSON(t, "/ui/api/rate/peek", req)
		if resp.StatusCode != 200 || !strings.Contains(body, `"remaining":3`) {
			t.Fatalf("peek: %d %s", resp.StatusCode, body)
		}
	}
}

// The pages load nothing from another origin: every src and href is a
// path on this server.
func TestDashboardAssetsAreSelfContained(t *testing.T) {
	inlineStyle := regexp.MustCompile(`style\s*[=:]\s*["']|<style|setAttribute\(\s*["']style`)
	ext := regexp.MustCompile(`(?i)(src|href|action)\s*=\s*["'](https?:)?//|@import|url\(\s*["']?(https?:)?//|fetch\(\s*["']https?:`)
	err := fs.WalkDir(server.UIFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(server.UIFiles(), path)
		if err != nil {
			return err
		}
		if m := ext.Find(b); m != nil {
			t.Errorf("%s refers to another origin: %s", path, m)
		}
		// The policy refuses inline styles: styles go in app.css or
		// through the CSSOM.
		if m := inlineStyle.Find(b); m != nil {
			t.Errorf("%s sets an inline style the page's policy refuses: %s", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newDash(t, nil)
	for _, p := range []string{"/ui/assets/app.js", "/ui/assets/app.css"} {
		if resp, _ := e.req(t, "GET", p, nil); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
	if resp, _ := e.req(t, "GET", "/ui/nothing", nil); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nothing: %d", resp.StatusCode)
	}
}

// noList hides the store's lease.Lister.
type noList struct{ lease.Store }

func TestDashboardWatchesKeysWithoutList(t *testing.T) {
	m, st := memStores(t)
	srv, err := server.New(server.Stores{Leases: noList{st.Leases}}, &server.Options{Config: testConfig(), UIRefresh: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	jar, _ := cookiejar.New(nil)
	e := &dashEnv{mem: m, url: hs.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}, logs: &syncBuf{}}
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	_, body := e.req(t, "GET", "/ui/api/me", nil)
	if !strings.Contains(body, `"listLeases":false`) {
		t.Errorf("api/me: %s", body)
	}
	g, err := m.Leases().Acquire(context.Background(), "k", "holder-token-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rd, stop := e.stream(t, url.Values{"key": {"k"}, "user": {"alice"}})
	defer stop()
	_, data := event(t, rd)
	var s snapT
	json.Unmarshal([]byte(data), &s)
	if s.Leases.Status != 501 || !strings.Contains(string(s.Leases.Body), serveapi.TypeNotSupported) {
		t.Errorf("list on a store without one: %d %s", s.Leases.Status, s.Leases.Body)
	}
	var info serveapi.LeaseInfo
	json.Unmarshal(s.Watched["k"].Body, &info)
	if !info.Held || info.Fence != g.Fence || info.TTL.D() <= 0 {
		t.Errorf("watched key: %s", s.Watched["k"].Body)
	}
	if s.Sessions.Status != 501 {
		t.Errorf("sessions on a store without them: %d", s.Sessions.Status)
	}
}

func TestDashboardRefusesBadOptions(t *testing.T) {
	for _, o := range []server.Options{{UIPath: "/ui"}, {UIPath: "ui/"}, {UIPath: "/v1/ui/"}, {UIRefresh: time.Millisecond}, {UIRefresh: time.Hour}} {
		if _, err := server.New(server.Stores{}, &o); !errors.Is(err, server.ErrConfig) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	// The root may be the UI path.
	if _, err := server.New(server.Stores{}, &server.Options{UIPath: "/"}); err != nil {
		t.Errorf("UIPath /: %v", err)
	}
	// Another UI path serves the dashboard there.
	o := server.Options{UIPath: "/admin/", Config: testConfig()}
	srv, err := server.New(server.Stores{}, &o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/admin/" || !strings.Contains(string(b), `action="/admin/login"`) {
		t.Errorf("GET / with UIPath /admin/: %s %.200s", resp.Request.URL.Path, b)
	}
}

// The event stream outlives the server's write timeout, which bounds a
// whole response: each event moves the deadline on.
func TestDashboardStreamOutlivesWriteTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWait, cfg.WriteTimeout = time.Millisecond, 300*time.Millisecond
	srv, err := server.New(server.Stores{}, &server.Options{Config: cfg, UIRefresh: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer("127.0.0.1:0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()
	jar, _ := cookiejar.New(nil)
	e := &dashEnv{url: "http://" + ln.Addr().String(), c: &http.Client{Jar: jar, Timeout: 10 * time.Second}, logs: &syncBuf{}}
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	rd, stop := e.stream(t, url.Values{})
	defer stop()
	start := time.Now()
	for n := 0; time.Since(start) < time.Second; n++ {
		if name, _ := event(t, rd); name != "snapshot" {
			t.Fatalf("event %d: %q", n, name)
		}
	}
}

// TestDashboardElectionsPastOnePage: the elections panel shows a led
// election listed after more than one page of ended ones (whose records
// the store keeps), and only the led ones.
func TestDashboardElectionsPastOnePage(t *testing.T) {
	e := newDash(t, nil)
	ctx := context.Background()
	for i := range 250 {
		k := fmt.Sprintf("%sended-%03d", election.KeyPrefix, i)
		tok := fmt.Sprintf("ended-token-%03d-0123456789", i)
		if _, err := e.mem.Leases().Acquire(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := e.mem.Leases().Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	el, err := election.New(e.mem.Leases(), "zz-settlement", &election.Options{Holder: "worker-9"})
	if err != nil {
		t.Fatal(err)
	}
	term, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if e.login(t, adminTok).StatusCode != 200 {
		t.Fatal("login failed")
	}
	rd, stop := e.stream(t, url.Values{"list": {"1"}})
	defer stop()
	name, data := event(t, rd)
	if name != "snapshot" {
		t.Fatalf("event %q", name)
	}
	var s snapT
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		t.Fatal(err)
	}
	var ll serveapi.LeaseList
	if err := json.Unmarshal(s.Elections.Body, &ll); err != nil {
		t.Fatalf("elections panel: %v: %s", err, s.Elections.Body)
	}
	if s.Elections.Status != 200 || len(ll.Leases) != 1 || ll.Leases[0].Key != election.KeyPrefix+"zz-settlement" ||
		ll.Leases[0].Fence != term.Fence() || ll.Leases[0].Holder != "worker-9" || ll.Next != "" {
		first := ""
		if len(ll.Leases) > 0 {
			first = ll.Leases[0].Key
		}
		t.Fatalf("elections panel: status %d, %d leases (first %q), next %q; want the one led election",
			s.Elections.Status, len(ll.Leases), first, ll.Next)
	}
}
