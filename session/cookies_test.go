package session_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

// countingStore counts the store loads the middleware makes.
type countingStore struct {
	session.Store
	loads atomic.Int64
}

func (c *countingStore) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	c.loads.Add(1)
	return c.Store.Load(ctx, id, idle)
}

// doCookies sends a request with the given cookies of the session's name,
// in order.
func doCookies(h http.Handler, method, target string, values ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for _, v := range values {
		r.AddCookie(&http.Cookie{Name: session.DefaultCookieName, Value: v})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func varies(h http.Header) bool {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "Cookie") {
				return true
			}
		}
	}
	return false
}

// Every response the middleware lets through depends on the cookie and
// says so, once.
func TestVaryCookie(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	tok := login(t, h, "alice", "")
	cases := []struct {
		name string
		w    *httptest.ResponseRecorder
	}{
		{"anonymous", do(h, "GET", "/me", "")},
		{"logged in", do(h, "GET", "/me", tok)},
		{"saving", do(h, "POST", "/cart?item=a", tok)},
		{"dead cookie", do(h, "GET", "/me", "garbage")},
		{"login", do(h, "POST", "/login?user=bob", "")},
	}
	f.faults.Cut()
	cases = append(cases, struct {
		name string
		w    *httptest.ResponseRecorder
	}{"store down", do(h, "GET", "/me", tok)})
	f.faults.Heal()
	for _, c := range cases {
		if !varies(c.w.Header()) {
			t.Errorf("%s: Vary = %q, want Cookie", c.name, c.w.Header().Values("Vary"))
		}
	}
	if cases[5].w.Code != http.StatusServiceUnavailable {
		t.Fatalf("store down: %d", cases[5].w.Code)
	}
	// A handler's own Vary is kept, and Cookie is not repeated.
	m := f.m
	hv := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		w.Write([]byte("ok"))
	}))
	w := do(hv, "GET", "/", tok)
	if got := w.Header().Values("Vary"); !slices.Equal(got, []string{"Cookie", "Accept-Encoding"}) {
		t.Fatalf("Vary = %q", got)
	}
	wrap := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Origin, cookie")
		hv.ServeHTTP(w, r)
	})
	if got := do(wrap, "GET", "/", tok).Header().Values("Vary"); !slices.Equal(got, []string{"Origin, cookie", "Accept-Encoding"}) {
		t.Fatalf("Vary = %q, want Cookie once", got)
	}
}

func newCountingFixture(t *testing.T) (*fixture, *countingStore) {
	f := newFixture(t)
	cs := &countingStore{Store: f.store}
	m, err := session.New(cs, &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 8 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f, cs
}

// A request with several cookies of the session's name uses the first that
// names a live session and never clears a cookie because another one was
// bad; past MaxSessionCookies well-formed ones it is anonymous without
// reading the store further, and clears nothing.
func TestSeveralSessionCookies(t *testing.T) {
	f, cs := newCountingFixture(t)
	h := f.app()
	valid := login(t, h, "alice", "")
	bobs := login(t, h, "bob", "")
	// A well-formed token that names no session, and one of a session that
	// was logged out.
	forged := strings.Repeat("A", len(valid))
	dead := login(t, h, "carol", "")
	do(h, "POST", "/logout", dead)

	cases := []struct {
		name    string
		cookies []string
		body    string
		clear   bool
		loads   int64
	}{
		{"forged then valid", []string{forged, valid}, "alice ", false, 2},
		{"valid then forged", []string{valid, forged}, "alice ", false, 1},
		{"malformed then valid", []string{"garbage", valid}, "alice ", false, 1},
		{"dead then valid", []string{dead, valid}, "alice ", false, 2},
		{"empty then valid", []string{"", valid}, "alice ", false, 1},
		{"first live wins", []string{bobs, valid}, "bob ", false, 1},
		{"all bad", []string{forged, "garbage", dead}, "anonymous", true, 2},
		{"only malformed", []string{"garbage", "x"}, "anonymous", true, 0},
		{"at the limit", []string{forged, forged, forged, valid}, "alice ", false, 4},
		{"malformed do not count", []string{"g", forged, "g", forged, "g", forged, valid}, "alice ", false, 4},
		{"past the limit", []string{forged, forged, forged, forged, valid}, "anonymous", false, 4},
		{"many past the limit", slices.Repeat([]string{forged}, 100), "anonymous", false, 4},
	}
	for _, c := range cases {
		cs.loads.Store(0)
		w := doCookies(h, "GET", "/me", c.cookies...)
		ck := sessionCookie(t, w)
		if w.Code != 200 || w.Body.String() != c.body {
			t.Errorf("%s: %d %q, want %q", c.name, w.Code, w.Body, c.body)
		}
		if cleared := ck != nil && ck.MaxAge < 0; cleared != c.clear || (ck != nil && !cleared) {
			t.Errorf("%s: Set-Cookie %q, want cleared %v", c.name, w.Header().Get("Set-Cookie"), c.clear)
		}
		if n := cs.loads.Load(); n != c.loads {
			t.Errorf("%s: %d store loads, want %d", c.name, n, c.loads)
		}
	}
	// The valid session is still there and still works on its own.
	if w := do(h, "GET", "/me", valid); w.Body.String() != "alice " {
		t.Fatalf("the valid session after the requests: %q", w.Body)
	}
	if recs, _ := f.direct.List(context.Background(), "alice"); len(recs) != 1 {
		t.Fatalf("alice's sessions: %+v", recs)
	}
}

// A store failure on any of the cookies refuses the request (503), never
// serves it as anonymous or as another cookie's session.
func TestSeveralSessionCookiesStoreDown(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	valid := login(t, h, "alice", "")
	f.faults.Cut()
	defer f.faults.Heal()
	w := doCookies(h, "GET", "/me", strings.Repeat("A", len(valid)), valid)
	if w.Code != http.StatusServiceUnavailable || sessionCookie(t, w) != nil {
		t.Fatalf("store down: %d, Set-Cookie %q", w.Code, w.Header().Get("Set-Cookie"))
	}
}

// A cookie planted by a sibling host under a custom (not __Host-) name and
// sent before the valid one neither hides the session nor clears its
// cookie.
func TestPlantedCookieCustomName(t *testing.T) {
	ms := newMem(t, nil)
	m, err := session.New(ms.Sessions(), &session.Options{Cookie: session.CookieOptions{Name: "sid"}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			m.Login(w, r, "alice", nil)
			return
		}
		if s := session.FromContext(r.Context()); s != nil {
			w.Write([]byte(s.UserID()))
		}
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/login", nil))
	valid := w.Result().Cookies()[0].Value
	r := httptest.NewRequest("GET", "/account/me", nil)
	r.Header.Set("Cookie", "sid=planted-by-a-sibling-host; other=1; sid="+valid)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Body.String() != "alice" || w.Header().Get("Set-Cookie") != "" {
		t.Fatalf("%q, Set-Cookie %q: want alice and no cookie change", w.Body, w.Header().Get("Set-Cookie"))
	}
}
