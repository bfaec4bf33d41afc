package ratelimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/memstore"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

type problemBody struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Violated []string `json:"violated-policies"`
}

func serve(t *testing.T, h http.Handler, remote string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", "/things/1", nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func problem(t *testing.T, w *httptest.ResponseRecorder) problemBody {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	return p
}

func fakeStore(t testing.TB) (*ratelimittest.Clock, *memstore.Store) {
	clock := ratelimittest.NewClock(time.Date(2041, 1, 2, 3, 4, 5, 0, time.UTC))
	return clock, newMem(t, &memstore.Options{Clock: clock.Now})
}

func TestMiddlewareLimitsAndFields(t *testing.T) {
	clock, ms := fakeStore(t)
	l, _ := ratelimit.New(ms.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "per-ip", Rate: 3, Period: time.Minute}, nil)
	m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{Rules: []ratelimit.Rule{{Limiter: l, Key: ratelimit.ClientIP(nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(ok)
	for i := range 3 {
		w := serve(t, h, "203.0.113.7:1234", nil)
		if w.Code != 200 {
			t.Fatalf("request %d: %d", i+1, w.Code)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"per-ip";q=3;w=60`; got != want {
			t.Fatalf("RateLimit-Policy %q, want %q", got, want)
		}
		// The window ends 60s after the first request; t rounds up.
		if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"per-ip";r=%d;t=%d`, 2-i, []int{60, 60, 59}[i]); got != want {
			t.Fatalf("RateLimit %q, want %q", got, want)
		}
		clock.Advance(time.Second / 2)
	}
	w := serve(t, h, "203.0.113.7:999", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d", w.Code)
	}
	// The window ends 60s after the first request: 58.5s from now, so the
	// integer Retry-After is 59 and the effective window the same.
	if got := w.Header().Get("Retry-After"); got != "59" {
		t.Fatalf("Retry-After %q, want 59", got)
	}
	if got, want := w.Header().Get("RateLimit"), `"per-ip";r=0;t=59`; got != want {
		t.Fatalf("RateLimit %q, want %q", got, want)
	}
	p := problem(t, w)
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Status != 429 ||
		len(p.Violated) != 1 || p.Violated[0] != "per-ip" || p.Title == "" {
		t.Fatalf("problem %+v", p)
	}
	// Another client is independent.
	if w := serve(t, h, "198.51.100.1:80", nil); w.Code != 200 {
		t.Fatalf("another client: %d", w.Code)
	}
	// Sub-second remainders round up: never a Retry-After of 0.
	clock.Advance(58*time.Second + 400*time.Millisecond)
	w = serve(t, h, "203.0.113.7:1", nil)
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("100ms before the window ends: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	clock.Advance(100 * time.Millisecond)
	if w := serve(t, h, "203.0.113.7:1", nil); w.Code != 200 {
		t.Fatalf("after the window: %d", w.Code)
	}
	if st := m.Stats(); st.Allowed != 5 || st.Limited != 2 || st.StoreErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMiddlewareGroupAllOrNothing(t *testing.T) {
	_, ms := fakeStore(t)
	user, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "per-user", Rate: 2, Period: time.Hour}, nil)
	global, _ := ratelimit.New(ms.Limits(), ratelimit.SlidingLog, ratelimit.Limit{Name: "global", Rate: 3, Period: 1500 * time.Millisecond}, nil)
	m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{Rules: []ratelimit.Rule{
		{Limiter: user, Key: ratelimit.Header("X-Api-Key")},
		{Limiter: global, Key: ratelimit.Const("all")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(ok)
	key := func(k string) map[string]string { return map[string]string{"X-Api-Key": k} }
	for i := range 2 {
		if w := serve(t, h, "192.0.2.1:1", key("alice")); w.Code != 200 {
			t.Fatalf("alice %d: %d", i, w.Code)
		}
	}
	w := serve(t, h, "192.0.2.1:1", key("alice"))
	if w.Code != 429 || problem(t, w).Violated[0] != "per-user" {
		t.Fatalf("alice over her limit: %d %s", w.Code, w.Body)
	}
	// The global limit was not charged for alice's refused request.
	if w := serve(t, h, "192.0.2.1:1", key("bob")); w.Code != 200 {
		t.Fatalf("bob: %d", w.Code)
	}
	pol := w.Header().Get("RateLimit-Policy")
	if pol != `"per-user";q=2;w=3600, "global";q=3` {
		t.Fatalf("RateLimit-Policy %q (w is left out for a period of 1.5s)", pol)
	}
	w = serve(t, h, "192.0.2.1:1", key("carol"))
	if w.Code != 429 || problem(t, w).Violated[0] != "global" {
		t.Fatalf("carol over the global limit: %d %s", w.Code, w.Body)
	}
	// Requests without the header are limited by the global rule only.
	if w := serve(t, h, "192.0.2.1:1", nil); w.Code != 429 || !strings.HasPrefix(w.Header().Get("RateLimit"), `"global";r=0`) {
		t.Fatalf("anonymous: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
}

func TestMiddlewareFailurePolicies(t *testing.T) {
	_, ms := fakeStore(t)
	s, faults := ratelimittest.Wrap(ms.Limits())
	l, _ := ratelimit.New(s, ratelimit.GCRA, ratelimit.Limit{Name: "per-ip", Rate: 4, Period: time.Minute}, nil)
	var logs bytes.Buffer
	mk := func(p ratelimit.FailurePolicy, share float64) *ratelimit.Middleware {
		m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{
			Rules:     []ratelimit.Rule{{Limiter: l, Key: ratelimit.ClientIP(nil)}},
			OnFailure: p, LocalShare: share,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	faults.Cut()
	closed := mk(ratelimit.FailClosed, 0)
	w := serve(t, closed.Handler(ok), "192.0.2.9:1", nil)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" ||
		problem(t, w).Type != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" {
		t.Fatalf("fail closed: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if st := closed.Stats(); st.StoreErrors != 1 || st.FailedClosed != 1 || st.Allowed != 0 {
		t.Fatalf("fail closed stats %+v", st)
	}
	if !strings.Contains(logs.String(), "fail closed") {
		t.Fatalf("no log record: %q", logs.String())
	}
	open := mk(ratelimit.FailOpen, 0)
	for range 10 {
		if w := serve(t, open.Handler(ok), "192.0.2.9:1", nil); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("fail open: %d %q", w.Code, w.Header().Get("RateLimit"))
		}
	}
	if st := open.Stats(); st.FailedOpen != 10 {
		t.Fatalf("fail open stats %+v", st)
	}
	// Local at half the limit: 2 of 4 per instance.
	local := mk(ratelimit.FailLocal, 0.5)
	for i := range 2 {
		if w := serve(t, local.Handler(ok), "192.0.2.9:1", nil); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"per-ip";q=2;w=60` {
			t.Fatalf("local %d: %d %q", i, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	if w := serve(t, local.Handler(ok), "192.0.2.9:1", nil); w.Code != 429 {
		t.Fatalf("local 3rd: %d", w.Code)
	}
	if st := local.Stats(); st.LocalUsed != 3 || st.Allowed != 2 || st.Limited != 1 {
		t.Fatalf("local stats %+v", st)
	}
	// Healed: the store decides again (nothing was consumed in it).
	faults.Heal()
	if w := serve(t, local.Handler(ok), "192.0.2.9:1", nil); w.Code != 200 || w.Header().Get("RateLimit") != `"per-ip";r=3;t=15` {
		t.Fatalf("after healing: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	if _, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{Rules: []ratelimit.Rule{{Limiter: l, Key: ratelimit.ClientIP(nil)}}, OnFailure: ratelimit.FailLocal}); err == nil {
		t.Fatal("FailLocal without a share accepted")
	}
}

func TestMiddlewareCostAndSkips(t *testing.T) {
	_, ms := fakeStore(t)
	l, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "bytes", Rate: 1000, Period: time.Second}, nil)
	m, _ := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{
		Rules: []ratelimit.Rule{{Limiter: l, Key: ratelimit.User(func(r *http.Request) string { return r.Header.Get("X-User") })}},
		Cost: func(r *http.Request) int {
			if r.Header.Get("X-Big") != "" {
				return 2000
			}
			return 600
		},
	})
	h := m.Handler(ok)
	if w := serve(t, h, "192.0.2.1:1", nil); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("a request without a user is not limited: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	if w := serve(t, h, "192.0.2.1:1", map[string]string{"X-User": "u1"}); w.Code != 200 {
		t.Fatalf("600 of 1000: %d", w.Code)
	}
	if w := serve(t, h, "192.0.2.1:1", map[string]string{"X-User": "u1"}); w.Code != 429 {
		t.Fatalf("600 more: %d", w.Code)
	}
	w := serve(t, h, "192.0.2.1:1", map[string]string{"X-User": "u2", "X-Big": "1"})
	if w.Code != 429 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("a cost above capacity: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name, remote, xff, real string
		o                       *ratelimit.IPOptions
		want                    string
	}{
		{"v4 peer", "203.0.113.7:443", "", "", nil, "ip:203.0.113.7"},
		{"v6 peer folded to /64", "[2001:db8:1:2:3:4:5:6]:443", "", "", nil, "ip:2001:db8:1:2::/64"},
		{"v6 same /64", "[2001:db8:1:2:ffff::1]:443", "", "", nil, "ip:2001:db8:1:2::/64"},
		{"v4-mapped v6 is v4", "[::ffff:203.0.113.7]:1", "", "", nil, "ip:203.0.113.7"},
		{"v6 /128", "[2001:db8::1]:1", "", "", &ratelimit.IPOptions{IPv6Prefix: 128}, "ip:2001:db8::1"},
		{"v4 /24", "203.0.113.7:1", "", "", &ratelimit.IPOptions{IPv4Prefix: 24}, "ip:203.0.113.0/24"},
		{"header ignored without trusted proxies", "203.0.113.7:1", "1.2.3.4", "", nil, "ip:203.0.113.7"},
		{"header ignored from an untrusted peer", "203.0.113.7:1", "1.2.3.4", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:203.0.113.7"},
		{"trusted proxy forwards", "10.1.1.1:1", "198.51.100.4", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:198.51.100.4"},
		{"spoofed left entries ignored", "10.1.1.1:1", "6.6.6.6, 198.51.100.4, 10.2.2.2", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:198.51.100.4"},
		{"v6 client via proxy", "[fd00::1]:1", "2001:db8:9:9::7", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:2001:db8:9:9::/64"},
		{"all hops trusted", "10.1.1.1:1", "10.3.3.3", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:10.3.3.3"},
		{"garbage hop stops at the proxy", "10.1.1.1:1", "198.51.100.4, garbage", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:10.1.1.1"},
		{"host:port hop", "10.1.1.1:1", "198.51.100.4:5555", "", &ratelimit.IPOptions{TrustedProxies: proxies}, "ip:198.51.100.4"},
		{"X-Real-IP", "10.1.1.1:1", "", "198.51.100.5", &ratelimit.IPOptions{TrustedProxies: proxies, Header: "X-Real-IP"}, "ip:198.51.100.5"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if c.real != "" {
			r.Header.Set("X-Real-IP", c.real)
		}
		got, err := ratelimit.ClientIP(c.o)(r)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// TestClientIPNonIPPeer: a peer that is not an IP address (a Unix socket:
// "@", "", a path) gets a fixed key per address instead of an error, so
// such requests are still limited (together).
func TestClientIPNonIPPeer(t *testing.T) {
	for remote, want := range map[string]string{
		"@":              "unix:@",
		"":               "unix:",
		"/run/app.sock":  "unix:/run/app.sock",
		"not an address": "unix:not an address",
		"\xff\x00":       ratelimit.NormalizeKey("unix:\xff\x00"),
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		got, err := ratelimit.ClientIP(nil)(r)
		if err != nil || got != want || driver.ValidateKey(got) != nil {
			t.Errorf("peer %q: %q, %v; want %q", remote, got, err, want)
		}
	}
	_, ms := fakeStore(t)
	l, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Hour}, nil)
	m, _ := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{Rules: []ratelimit.Rule{{Limiter: l, Key: ratelimit.ClientIP(nil)}}})
	h := m.Handler(ok)
	if w := serve(t, h, "@", nil); w.Code != 200 {
		t.Fatalf("first request over a Unix socket: %d", w.Code)
	}
	if w := serve(t, h, "@", nil); w.Code != 429 {
		t.Fatalf("second request over a Unix socket: %d", w.Code)
	}
}

// TestClientIPOptionsValidated: out-of-range prefix lengths, invalid
// proxy networks and bad header names are refused with ErrInvalid.
func TestClientIPOptionsValidated(t *testing.T) {
	for _, o := range []*ratelimit.IPOptions{
		{IPv6Prefix: -1}, {IPv6Prefix: 129}, {IPv4Prefix: -8}, {IPv4Prefix: 33},
		{TrustedProxies: []netip.Prefix{{}}}, {Header: "X Bad"}, {Header: "X-\n"},
	} {
		if _, err := ratelimit.NewClientIP(o); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("NewClientIP(%+v): %v, want ErrInvalid", *o, err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		if _, err := ratelimit.ClientIP(o)(r); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("ClientIP(%+v): %v, want ErrInvalid", *o, err)
		}
	}
	if _, err := ratelimit.NewClientIP(&ratelimit.IPOptions{IPv6Prefix: 128, IPv4Prefix: 1, Header: "X-Real-IP"}); err != nil {
		t.Fatal(err)
	}
}

// TestJoinInjective: parts holding the separator no longer collide.
func TestJoinInjective(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	pairs := [][2][2]string{
		{{"u:a|r:x", "y"}, {"u:a", "r:x|y"}},
		{{`a\`, "b"}, {"a", `\b`}},
		{{`a\|`, "b"}, {"a", `|b`}},
		{{"a|", ""}, {"a", "|"}},
	}
	for _, p := range pairs {
		a, _ := ratelimit.Join(ratelimit.Const(p[0][0]), ratelimit.Const(p[0][1]))(r)
		b, _ := ratelimit.Join(ratelimit.Const(p[1][0]), ratelimit.Const(p[1][1]))(r)
		if a == b {
			t.Errorf("Join(%q) = Join(%q) = %q", p[0], p[1], a)
		}
	}
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("POST", "/things/7", nil)
	r.Header.Set("Authorization", "Bearer s3cr3t-token")
	k, err := ratelimit.Header("Authorization")(r)
	if err != nil || !strings.HasPrefix(k, "h:") || len(k) != 34 || strings.Contains(k, "s3cr3t") {
		t.Fatalf("Header key %q, %v", k, err)
	}
	if _, err := ratelimit.Header("X-Missing")(r); err != ratelimit.ErrNoKey {
		t.Fatalf("missing header: %v", err)
	}
	if k, _ := ratelimit.Route()(r); k != "r:POST /things/7" {
		t.Fatalf("Route without a pattern: %q", k)
	}
	j, err := ratelimit.Join(ratelimit.Const("a"), ratelimit.Route())(r)
	if err != nil || j != "a|r:POST /things/7" {
		t.Fatalf("Join: %q, %v", j, err)
	}
	if _, err := ratelimit.Join(ratelimit.Const("a"), ratelimit.Header("X-Missing"))(r); err != ratelimit.ErrNoKey {
		t.Fatalf("Join with a missing part: %v", err)
	}
	mux := http.NewServeMux()
	var routed string
	mux.HandleFunc("POST /things/{id}", func(w http.ResponseWriter, r *http.Request) { routed, _ = ratelimit.Route()(r) })
	mux.ServeHTTP(httptest.NewRecorder(), r)
	if routed != "r:POST /things/{id}" {
		t.Fatalf("Route with a pattern: %q", routed)
	}
}
