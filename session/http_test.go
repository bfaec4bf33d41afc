package session_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/memstore"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

type fixture struct {
	t      *testing.T
	clock  *clock
	store  session.Store // what the manager uses (cuttable)
	direct session.Store
	faults sessiontest.Faults
	m      *session.Manager
}

func newFixture(t *testing.T) *fixture {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ms := newMem(t, &memstore.Options{Clock: c.Now})
	s, faults := sessiontest.Wrap(ms.Sessions())
	m, err := session.New(s, &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 8 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, clock: c, store: s, direct: ms.Sessions(), faults: faults, m: m}
}

// app is a small site: /login, /logout, /renew, /cart (adds an item), /me.
func (f *fixture) app(hooks ...func(w http.ResponseWriter, r *http.Request)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if _, err := f.m.Login(w, r, r.FormValue("user"), map[string]string{"role": "user"}); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Write([]byte("welcome"))
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		if err := f.m.Logout(w, r); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	mux.HandleFunc("POST /renew", func(w http.ResponseWriter, r *http.Request) {
		if err := f.m.Renew(w, r); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	mux.HandleFunc("POST /cart", func(w http.ResponseWriter, r *http.Request) {
		s := session.FromContext(r.Context())
		if s == nil {
			http.Error(w, "anonymous", http.StatusUnauthorized)
			return
		}
		for _, h := range hooks {
			h(w, r)
		}
		s.Set("cart", s.Values()["cart"]+r.FormValue("item"))
		w.Write([]byte("added"))
	})
	mux.HandleFunc("GET /me", func(w http.ResponseWriter, r *http.Request) {
		s := session.FromContext(r.Context())
		if s == nil {
			w.Write([]byte("anonymous"))
			return
		}
		for _, h := range hooks {
			h(w, r)
		}
		w.Write([]byte(s.UserID() + " " + s.Values()["cart"]))
	})
	return f.m.Handler(mux)
}

func do(h http.Handler, method, target, cookie string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: session.DefaultCookieName, Value: cookie})
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// sessionCookie returns the session cookie the response sets (nil if none).
func sessionCookie(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	var found *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == session.DefaultCookieName {
			if found != nil {
				t.Fatal("two session cookies in one response")
			}
			found = c
		}
	}
	return found
}

func login(t *testing.T, h http.Handler, user, cookie string) string {
	t.Helper()
	w := do(h, "POST", "/login?user="+user, cookie)
	if w.Code != 200 {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	c := sessionCookie(t, w)
	if c == nil || c.Value == "" {
		t.Fatal("login set no cookie")
	}
	return c.Value
}

func TestCookieDefaults(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	w := do(h, "POST", "/login?user=alice", "")
	raw := w.Header().Get("Set-Cookie")
	for _, want := range []string{"__Host-session=", "Path=/", "HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(raw, want) {
			t.Errorf("Set-Cookie %q lacks %q", raw, want)
		}
	}
	for _, bad := range []string{"Max-Age", "Expires", "Domain"} {
		if strings.Contains(raw, bad) {
			t.Errorf("Set-Cookie %q has %s (the cookie must end with the browser session)", raw, bad)
		}
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store on a response that sets the cookie", cc)
	}
	// A request that sets no cookie leaves caching alone.
	w = do(h, "GET", "/me", sessionCookie(t, w).Value)
	if w.Header().Get("Set-Cookie") != "" || w.Header().Get("Cache-Control") != "" || w.Body.String() != "alice " {
		t.Fatalf("plain request: Set-Cookie %q, Cache-Control %q, body %q", w.Header().Get("Set-Cookie"), w.Header().Get("Cache-Control"), w.Body)
	}
}

func TestCookieOptions(t *testing.T) {
	ms := newMem(t, nil)
	m, err := session.New(ms.Sessions(), &session.Options{Cookie: session.CookieOptions{
		Name: "sid", Path: "/app", Insecure: true, SameSite: http.SameSiteStrictMode, Persistent: true,
	}, AbsoluteTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Login(w, r, "u", nil)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/app/login", nil))
	raw := w.Header().Get("Set-Cookie")
	for _, want := range []string{"sid=", "Path=/app", "SameSite=Strict", "Max-Age=", "HttpOnly"} {
		if !strings.Contains(raw, want) {
			t.Errorf("Set-Cookie %q lacks %q", raw, want)
		}
	}
	if strings.Contains(raw, "Secure") {
		t.Errorf("Set-Cookie %q is Secure although Insecure was set", raw)
	}
}

func TestRequestSavesChangesWithCAS(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	tok := login(t, h, "alice", "")
	for _, item := range []string{"a", "b"} {
		if w := do(h, "POST", "/cart?item="+item, tok); w.Code != 200 || w.Header().Get("Set-Cookie") != "" {
			t.Fatalf("cart: %d %s, Set-Cookie %q", w.Code, w.Body, w.Header().Get("Set-Cookie"))
		}
	}
	recs, err := f.direct.List(context.Background(), "alice")
	if err != nil || len(recs) != 1 || recs[0].Version != 3 || !strings.Contains(string(recs[0].Data), `"cart":"ab"`) {
		t.Fatalf("stored: %+v, %v; want version 3 with cart ab", recs, err)
	}
	// A read-only request writes nothing (the version stays).
	do(h, "GET", "/me", tok)
	if recs, _ := f.direct.List(context.Background(), "alice"); recs[0].Version != 3 {
		t.Fatalf("a read-only request changed the version to %d", recs[0].Version)
	}
}

func TestLoginRotatesAndLogoutClears(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	first := login(t, h, "alice", "")
	second := login(t, h, "alice", first)
	if second == first {
		t.Fatal("login kept the token")
	}
	if w := do(h, "GET", "/me", first); w.Body.String() != "anonymous" {
		t.Fatalf("the token from before the login still works: %s", w.Body)
	}
	// A planted token from an attacker does not become authenticated.
	w := do(h, "POST", "/logout", second)
	c := sessionCookie(t, w)
	if c == nil || c.MaxAge >= 0 || c.Value != "" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("logout: cookie %+v, Cache-Control %q; want it cleared with no-store", c, w.Header().Get("Cache-Control"))
	}
	if !strings.Contains(w.Header().Get("Set-Cookie"), "Secure") {
		t.Fatalf("the clearing cookie lacks Secure (a __Host- cookie needs it): %q", w.Header().Get("Set-Cookie"))
	}
	if recs, _ := f.direct.List(context.Background(), "alice"); len(recs) != 0 {
		t.Fatalf("records left after logout: %+v", recs)
	}
	if w := do(h, "GET", "/me", second); w.Body.String() != "anonymous" || sessionCookie(t, w) == nil {
		t.Fatalf("after logout: %s, cookie %v; want anonymous and the dead cookie cleared", w.Body, sessionCookie(t, w))
	}
}

func TestRenewKeepsAbsoluteDeadline(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	tok := login(t, h, "alice", "")
	before, _ := f.direct.List(context.Background(), "alice")
	f.clock.Advance(time.Minute)
	w := do(h, "POST", "/renew", tok)
	c := sessionCookie(t, w)
	if w.Code != 200 || c == nil || c.Value == tok {
		t.Fatalf("renew: %d, cookie %v", w.Code, c)
	}
	after, _ := f.direct.List(context.Background(), "alice")
	if len(after) != 1 || !after[0].AbsoluteUntil.Equal(before[0].AbsoluteUntil) || after[0].ID == before[0].ID {
		t.Fatalf("renew: %+v -> %+v", before, after)
	}
	if w := do(h, "GET", "/me", tok); w.Body.String() != "anonymous" {
		t.Fatal("the old token still works after renew")
	}
}

// A cross-origin unsafe request is refused before the session is read or
// written: its idle deadline does not move and the handler never runs.
func TestCrossOriginRefusedBeforeSession(t *testing.T) {
	f := newFixture(t)
	ran := false
	h := f.app(func(http.ResponseWriter, *http.Request) { ran = true })
	tok := login(t, h, "alice", "")
	before, _ := f.direct.List(context.Background(), "alice")
	f.clock.Advance(time.Minute)
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "https://evil.example"},
	} {
		w := do(h, "POST", "http://shop.example/cart?item=x", tok, hdr...)
		if w.Code != http.StatusForbidden || ran {
			t.Fatalf("%v: %d, handler ran %v; want 403 before the handler", hdr, w.Code, ran)
		}
	}
	after, _ := f.direct.List(context.Background(), "alice")
	if !after[0].IdleUntil.Equal(before[0].IdleUntil) || after[0].Version != before[0].Version {
		t.Fatalf("a refused request touched the session: %+v -> %+v", before[0], after[0])
	}
	if w := do(h, "POST", "http://shop.example/cart?item=x", tok, "Sec-Fetch-Site", "same-origin"); w.Code != 200 || !ran {
		t.Fatalf("same-origin POST: %d", w.Code)
	}
}

// A store that cannot be reached gives 503, never an anonymous request.
func TestStoreDownIs503(t *testing.T) {
	f := newFixture(t)
	ran := false
	h := f.app(func(http.ResponseWriter, *http.Request) { ran = true })
	tok := login(t, h, "alice", "")
	f.faults.Cut()
	for _, req := range [][2]string{{"GET", "/me"}, {"POST", "/cart?item=x"}} {
		w := do(h, req[0], req[1], tok)
		if w.Code != http.StatusServiceUnavailable || ran || strings.Contains(w.Body.String(), "anonymous") {
			t.Fatalf("%s %s with the store down: %d %q, handler ran %v", req[0], req[1], w.Code, w.Body, ran)
		}
		if w.Header().Get("Retry-After") == "" || sessionCookie(t, w) != nil {
			t.Fatalf("503 without Retry-After, or the cookie was touched")
		}
	}
	f.faults.Heal()
	if w := do(h, "GET", "/me", tok); w.Body.String() != "alice " {
		t.Fatalf("after healing: %s", w.Body)
	}
}

// Request A loaded the session and changes it; request B logs out; A's
// save at the end of its request fails and the session stays revoked.
func TestLateSaveAfterLogoutInRequest(t *testing.T) {
	f := newFixture(t)
	loaded, proceed := make(chan struct{}), make(chan struct{})
	h := f.app(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			close(loaded)
			<-proceed
		}
	})
	tok := login(t, h, "alice", "")
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "POST", "/cart?item=late&slow=1", tok) }()
	<-loaded
	if w := do(h, "POST", "/logout", tok); w.Code != 200 {
		t.Fatalf("logout: %d", w.Code)
	}
	close(proceed)
	w := <-done
	if w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "added") {
		t.Fatalf("late request: %d %q; want 401 and the handler's response discarded", w.Code, w.Body)
	}
	if c := sessionCookie(t, w); c == nil || c.MaxAge >= 0 {
		t.Fatalf("late request did not clear the cookie: %v", c)
	}
	if recs, _ := f.direct.List(context.Background(), "alice"); len(recs) != 0 {
		t.Fatalf("the late save brought the session back: %+v", recs)
	}
	if w := do(h, "GET", "/me", tok); w.Body.String() != "anonymous" {
		t.Fatal("the revoked token works again")
	}
}

// Two requests change the session at once: one is saved, the other gets
// 409 and its change is not.
func TestConcurrentRequestsConflict(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	arrived := make(chan struct{}, 2)
	proceed := make(chan struct{})
	h := f.app(func(http.ResponseWriter, *http.Request) {
		arrived <- struct{}{}
		<-proceed
	})
	tok := login(t, h, "alice", "")
	codes := make([]int, 2)
	for i, item := range []string{"x", "y"} {
		wg.Go(func() { codes[i] = do(h, "POST", "/cart?item="+item, tok).Code })
	}
	<-arrived
	<-arrived
	close(proceed)
	wg.Wait()
	if !(codes[0] == 200 && codes[1] == 409 || codes[0] == 409 && codes[1] == 200) {
		t.Fatalf("codes %v, want one 200 and one 409", codes)
	}
	recs, _ := f.direct.List(context.Background(), "alice")
	if recs[0].Version != 2 {
		t.Fatalf("version %d, want 2 (one save)", recs[0].Version)
	}
}

func TestBadCookiesAreAnonymous(t *testing.T) {
	f := newFixture(t)
	h := f.app()
	tok := login(t, h, "alice", "")
	recs, _ := f.direct.List(context.Background(), "alice")
	for _, c := range []string{"garbage", string(recs[0].ID), tok[:len(tok)-1] + "A", strings.Repeat("A", len(tok))} {
		w := do(h, "GET", "/me", c)
		if w.Code != 200 || w.Body.String() != "anonymous" {
			t.Fatalf("cookie %q: %d %s", c, w.Code, w.Body)
		}
		if ck := sessionCookie(t, w); ck == nil || ck.MaxAge >= 0 {
			t.Fatalf("cookie %q was not cleared", c)
		}
	}
}

func TestLoginOutsideMiddleware(t *testing.T) {
	f := newFixture(t)
	r := httptest.NewRequest("POST", "/login", nil)
	if _, err := f.m.Login(httptest.NewRecorder(), r, "alice", nil); err == nil {
		t.Fatal("Login outside the middleware succeeded")
	}
	if err := f.m.Logout(httptest.NewRecorder(), r); err == nil {
		t.Fatal("Logout outside the middleware succeeded")
	}
}

func TestDefaultErrorHandler(t *testing.T) {
	for err, code := range map[error]int{
		session.ErrUnavailable: 503, session.ErrConflict: 409, session.ErrNotFound: 401, errors.New("x"): 500,
	} {
		w := httptest.NewRecorder()
		session.DefaultErrorHandler(w, httptest.NewRequest("GET", "/", nil), err)
		if w.Code != code || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%v: %d, want %d", err, w.Code, code)
		}
	}
}

// Plain-HTTP development needs one setting, Cookie.Insecure: the cookie is
// then named "session" (a __Host- cookie cannot work without Secure), and
// a __Host- name with Insecure is refused with an error that says what to
// set.
func TestPlainHTTPDevelopmentOneSetting(t *testing.T) {
	ms := newMem(t, nil)
	m, err := session.New(ms.Sessions(), &session.Options{Cookie: session.CookieOptions{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			m.Login(w, r, "u", nil)
			return
		}
		if s := session.FromContext(r.Context()); s != nil {
			w.Write([]byte(s.UserID()))
		}
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "http://localhost/login", nil))
	raw := w.Header().Get("Set-Cookie")
	if !strings.HasPrefix(raw, session.InsecureCookieName+"=") || strings.Contains(raw, "Secure") {
		t.Fatalf("Set-Cookie %q, want a %q cookie without Secure", raw, session.InsecureCookieName)
	}
	r := httptest.NewRequest("GET", "http://localhost/me", nil)
	r.Header.Set("Cookie", strings.SplitN(raw, ";", 2)[0])
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Body.String() != "u" {
		t.Fatalf("the plain-HTTP cookie did not load the session: %q", w.Body.String())
	}
	_, err = session.New(ms.Sessions(), &session.Options{Cookie: session.CookieOptions{Name: "__Host-sid", Insecure: true}})
	if !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), "set only Cookie.Insecure") {
		t.Fatalf("__Host- with Insecure: %v, want an error naming the setting", err)
	}
}
