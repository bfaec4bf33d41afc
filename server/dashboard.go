package server

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
)

// The dashboard's assets: plain HTML, CSS and JavaScript, embedded in the
// binary; the pages load nothing from anywhere else.
//
//go:embed ui
var uiFiles embed.FS

// Defaults of the dashboard.
const (
	// DefaultUIRefresh is Options.UIRefresh when zero.
	DefaultUIRefresh = time.Second
	// DashboardCookieName is the dashboard's login cookie over plain HTTP;
	// SecureDashboardCookieName over HTTPS (Options.HTTPS).
	DashboardCookieName       = "tenure-dashboard"
	SecureDashboardCookieName = "__Host-tenure-dashboard"
	// DashboardUserPrefix starts the user ID of a dashboard login session:
	// the rest is the name of the token that logged in.
	DashboardUserPrefix = "token:"
)

const (
	// maxWatched bounds the keys, limits and records one live view
	// watches (lease keys inspected, rate limits peeked, idempotency
	// records inspected).
	maxWatched = 16
	// leasePage is how many leases one live view lists.
	leasePage = 200
	// streamLife is how long one event stream lasts before the browser
	// reconnects (and the login session's idle deadline is refreshed).
	streamLife = 5 * time.Minute
	// loginRate is how many login attempts one client address may make per
	// minute.
	loginRate = 10
)

// uiOps are the operations the dashboard calls, as a token's operation
// list names them.
var uiOps = []string{"listLeases", "inspectLease", "listSessions", "revokeSession", "revokeUserSessions",
	"slotHistory", "allowRate", "inspectIdempotency", "completeIdempotency", "releaseIdempotency"}

// dashboard serves the web pages under the UI path: a login form, the live
// views, and their JSON and event-stream endpoints, all behind a login
// session of tenure's own session package.
type dashboard struct {
	s       *Server
	base    string // the UI path, ending in "/"
	m       *session.Manager
	logins  session.Store
	tries   *ratelimit.Limiter
	refresh time.Duration
	version string // Options.Version, shown in the page's footer
	login   *template.Template
	assets  http.Handler
}

// mountDashboard builds the dashboard and mounts it on the server's mux at
// base, with "/" redirecting to it.
func (s *Server) mountDashboard(base string, opt Options) error {
	if !strings.HasPrefix(base, "/") || !strings.HasSuffix(base, "/") || strings.HasPrefix(base, "/v1/") {
		return fmt.Errorf("%w: UIPath %q must start and end with \"/\" and lie outside /v1/", ErrConfig, base)
	}
	refresh := opt.UIRefresh
	if refresh == 0 {
		refresh = DefaultUIRefresh
	}
	if refresh < 100*time.Millisecond || refresh > time.Minute {
		return fmt.Errorf("%w: UIRefresh %v out of range [100ms, 1m]", ErrConfig, refresh)
	}
	// Login sessions live in this process, apart from the sessions the API
	// serves: they never show up in listSessions, revokeUserSessions of an
	// API client never ends them, nothing derived from a bearer token is
	// written to the store, and a restart ends them.
	mem, err := memstore.New(nil)
	if err != nil {
		return err
	}
	logins := mem.Sessions()
	cookie := session.CookieOptions{Name: DashboardCookieName, Insecure: true, SameSite: http.SameSiteStrictMode}
	if opt.HTTPS {
		cookie = session.CookieOptions{Name: SecureDashboardCookieName, SameSite: http.SameSiteStrictMode}
	}
	m, err := session.New(logins, &session.Options{
		Cookie: cookie, Logger: s.log,
		// The served store's session metrics stay about the served store.
		MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider(),
	})
	if err != nil {
		return fmt.Errorf("%w: dashboard: %v", ErrConfig, err)
	}
	tries, err := ratelimit.New(mem.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "tenure-dashboard-login", Rate: loginRate, Period: time.Minute}, nil)
	if err != nil {
		return err
	}
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return err
	}
	login, err := template.ParseFS(sub, "login.html")
	if err != nil {
		return err
	}
	d := &dashboard{s: s, base: base, m: m, logins: logins, tries: tries, refresh: refresh, version: opt.Version, login: login,
		assets: http.StripPrefix(base+"assets/", http.FileServerFS(mustSub(sub, "assets")))}

	h := func(pattern string, f http.HandlerFunc) { s.mux.Handle(pattern, d.page(m.Handler(f))) }
	if base != "/" {
		s.mux.Handle("GET /{$}", http.RedirectHandler(base, http.StatusFound))
	}
	h("GET "+base+"{$}", d.index)
	h("GET "+base+"assets/", d.assets.ServeHTTP)
	h("POST "+base+"login", d.doLogin)
	h("POST "+base+"logout", d.doLogout)
	h("GET "+base+"api/me", d.api("dashboardMe", d.me))
	h("GET "+base+"api/events", d.api("dashboardEvents", d.events))
	h("GET "+base+"api/discover", d.api("dashboardDiscover", d.discover))
	h("POST "+base+"api/rate/peek", d.api("allowRate", d.peekRate))
	h("POST "+base+"api/sessions/revoke", d.api("revokeSession", s.handlers["revokeSession"]))
	h("POST "+base+"api/sessions/revoke-user", d.api("revokeUserSessions", s.handlers["revokeUserSessions"]))
	h("POST "+base+"api/idempotency/resolve", d.api("completeIdempotency", d.resolveIdem))
	h("POST "+base+"api/idempotency/release", d.api("releaseIdempotency", d.forceReleaseIdem))
	// Anything else under the UI path is not found (not the index).
	h(base, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return nil
}

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// contentSecurityPolicy lets the pages load and connect to their own
// origin only: no other site's scripts, styles, fonts or images.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// page sets the headers every dashboard response carries.
func (d *dashboard) page(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, d.base+"assets/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// principalOf returns the token a request's login session stands for, or
// nil for an anonymous request (or a token no longer configured).
func (d *dashboard) principalOf(r *http.Request) *authToken {
	sess := session.FromContext(r.Context())
	if sess == nil {
		return nil
	}
	name, ok := sess.Get("token")
	if !ok || sess.UserID() != DashboardUserPrefix+name {
		return nil
	}
	for i := range d.s.tokens {
		if d.s.tokens[i].name == name {
			return &d.s.tokens[i]
		}
	}
	return nil
}

func (d *dashboard) index(w http.ResponseWriter, r *http.Request) {
	if d.principalOf(r) == nil {
		d.loginPage(w, http.StatusOK, "")
		return
	}
	serveAsset(w, r, "index.html")
}

func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	b, err := uiFiles.ReadFile("ui/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func (d *dashboard) loginPage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	d.login.Execute(w, struct{ Base, Error string }{d.base, msg})
}

// doLogin checks the token typed into the login form and starts a login
// session for it: the browser gets the session cookie (HttpOnly), never
// the token. Failed and successful attempts count against a per-address
// limit.
func (d *dashboard) doLogin(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status, name := 0, "-"
	defer func() {
		d.s.logRequest(r, "dashboardLogin", &statusWriter{status: status, id: newRequestID()}, name, start)
	}()
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if dec, err := d.tries.Allow(r.Context(), host); err != nil || !dec.Allowed {
		if err == nil {
			w.Header().Set("Retry-After", strconv.Itoa(int((dec.RetryAfter+time.Second-1)/time.Second)))
		}
		status = http.StatusTooManyRequests
		d.loginPage(w, status, "Too many attempts; wait a minute and try again.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	found := d.s.tokenFor(tok)
	if tok == "" || found == nil {
		status = http.StatusUnauthorized
		d.loginPage(w, status, "Unknown token.")
		return
	}
	name = found.name
	if _, err := d.m.Login(w, r, DashboardUserPrefix+found.name, map[string]string{"token": found.name}); err != nil {
		status = http.StatusServiceUnavailable
		d.loginPage(w, status, "The login could not be kept; try again.")
		return
	}
	status = http.StatusSeeOther
	http.Redirect(w, r, d.base, status)
}

func (d *dashboard) doLogout(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := "-"
	if t := d.principalOf(r); t != nil {
		name = t.name
	}
	status := http.StatusSeeOther
	defer func() {
		d.s.logRequest(r, "dashboardLogout", &statusWriter{status: status, id: newRequestID()}, name, start)
	}()
	if err := d.m.Logout(w, r); err != nil {
		status = http.StatusServiceUnavailable
		http.Error(w, "the logout could not be recorded; try again", status)
		return
	}
	http.Redirect(w, r, d.base, status)
}

// api wraps a dashboard endpoint as the API wraps its routes, with the
// login session in place of the bearer token: the token it stands for
// must be allowed op (the dashboard's own endpoints, named dashboard*,
// need only a login), its per-token rate limit applies, and the body is
// bounded.
func (d *dashboard) api(op string, h handler) http.HandlerFunc {
	need := op
	if strings.HasPrefix(op, "dashboard") {
		need = ""
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, id: newRequestID()}
		sw.Header().Set("X-Request-Id", sw.id)
		name := "-"
		defer func() { d.s.logRequest(r, op, sw, name, start) }()
		t := d.principalOf(r)
		if t == nil {
			writeProblem(sw, serveapi.NewProblem(serveapi.TypeUnauthorized, "log in to the dashboard first"))
			return
		}
		name = t.name
		if d.s.admit(sw, r, t, need) {
			h(sw, r, principal{t})
		}
	}
}

// me describes the login: the token's name, its namespaces, which of the
// dashboard's operations it may call, the server's clock and the refresh
// interval.
func (d *dashboard) me(w http.ResponseWriter, r *http.Request, p principal) {
	ops := map[string]bool{}
	for _, op := range uiOps {
		ops[op] = p.t.all || p.t.ops[op]
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"token": p.t.name, "prefixes": p.t.prefixes, "operations": ops,
		"now": time.Now().UTC(), "refresh": serveapi.Duration(d.refresh),
		"version": d.version,
		"features": map[string]bool{
			"listLeases":       d.s.canList(),
			"idempotencyAdmin": d.s.canSettle(),
		},
	})
}

// peekRate judges limits without consuming anything (allowRate with peek
// forced): the dashboard checks a limit before it watches it.
func (d *dashboard) peekRate(w http.ResponseWriter, r *http.Request, p principal) {
	var req serveapi.RateAllow
	if err := decodeBody(r, &req); err != nil {
		fail(w, err)
		return
	}
	req.Peek = true
	st, body := d.call(r.Context(), p, "allowRate", "/v1/rate/allow", req)
	w.Header().Set("Content-Type", "application/json")
	if st != http.StatusOK {
		w.Header().Set("Content-Type", serveapi.ProblemContentType)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(st)
	w.Write(body)
}

// recorder captures a handler's response for a panel of a snapshot.
type recorder struct {
	h      http.Header
	status int
	buf    bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.buf.Write(b)
}

// call runs operation op in process as p (the operation check included),
// a GET of target or, with a body, a POST, and returns its status and
// body.
func (d *dashboard) call(ctx context.Context, p principal, op, target string, body any) (int, json.RawMessage) {
	rec := &recorder{h: http.Header{}}
	if !p.t.all && !p.t.ops[op] {
		writeProblem(rec, serveapi.NewProblem(serveapi.TypeForbidden, fmt.Sprintf("token %q may not call %s", p.t.name, op)))
		return rec.status, rec.buf.Bytes()
	}
	method, rd := http.MethodGet, io.Reader(http.NoBody)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			fail(rec, invalidf("%v", err))
			return rec.status, rec.buf.Bytes()
		}
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		fail(rec, invalidf("%v", err))
		return rec.status, rec.buf.Bytes()
	}
	d.s.handlers[op](rec, req, p)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.status, bytes.TrimSpace(rec.buf.Bytes())
}

// panel is one part of a snapshot: an API answer (Status 200 and its
// Body) or a problem (Status and the problem as Body).
type panel struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body,omitempty"`
}

func (d *dashboard) panel(ctx context.Context, p principal, op, target string) *panel {
	st, b := d.call(ctx, p, op, target, nil)
	return &panel{Status: st, Body: b}
}

// view is what one event stream watches, from its query: prefix (leases
// listed; list=0 lists none), idemlist=0 (no idempotency records listed),
// key (lease keys inspected, repeated), user (sessions), job
// (slot history), limit (JSON rate requests peeked, repeated).
type view struct {
	prefix, user, job string
	listLeases        bool
	idemList          bool
	keys              []string
	limits            []serveapi.RateRequest
}

func parseView(q url.Values) (view, error) {
	v := view{prefix: q.Get("prefix"), user: q.Get("user"), job: q.Get("job"), listLeases: q.Get("list") != "0", idemList: q.Get("idemlist") != "0", keys: q["key"]}
	if len(v.keys) > maxWatched || len(q["limit"]) > maxWatched {
		return v, fmt.Errorf("at most %d watched keys and limits each", maxWatched)
	}
	for _, s := range q["limit"] {
		var rr serveapi.RateRequest
		if err := json.Unmarshal([]byte(s), &rr); err != nil {
			return v, fmt.Errorf("limit: %v", err)
		}
		v.limits = append(v.limits, rr)
	}
	return v, nil
}

// snapshot is one event of the stream.
type snapshot struct {
	Now    time.Time `json:"now"`
	Leases *panel    `json:"leases,omitempty"`
	// Elections lists the leases of package election (election/NAME):
	// who leads each election, its term's fence and time left.
	Elections *panel            `json:"elections,omitempty"`
	Watched   map[string]*panel `json:"watched,omitempty"`
	Sessions  *panel            `json:"sessions,omitempty"`
	Slots     *panel            `json:"slots,omitempty"`
	Limits    *panel            `json:"limits,omitempty"`
	Idem      *panel            `json:"idempotency,omitempty"`
}

// snapshot reads what v watches, as p, through the API's own handlers
// (so namespaces, operations and errors are exactly the API's).
func (d *dashboard) snapshot(ctx context.Context, p principal, v view) snapshot {
	out := snapshot{Now: time.Now().UTC()}
	if v.listLeases {
		out.Leases = d.panel(ctx, p, "listLeases",
			"/v1/leases?"+url.Values{"prefix": {v.prefix}, "limit": {strconv.Itoa(leasePage)}}.Encode())
	}
	if v.listLeases {
		out.Elections = d.electionsPanel(ctx, p)
	}
	if len(v.keys) > 0 {
		out.Watched = map[string]*panel{}
		for _, k := range v.keys {
			out.Watched[k] = d.panel(ctx, p, "inspectLease", "/v1/leases/inspect?"+url.Values{"key": {k}}.Encode())
		}
	}
	if v.user != "" {
		pn := d.panel(ctx, p, "listSessions", "/v1/sessions?"+url.Values{"user_id": {v.user}}.Encode())
		pn.Body = withoutSessionData(pn)
		out.Sessions = pn
	}
	if v.job != "" {
		out.Slots = d.panel(ctx, p, "slotHistory", "/v1/schedule/slots?"+url.Values{"job": {v.job}}.Encode())
	}
	if len(v.limits) > 0 {
		st, b := d.call(ctx, p, "allowRate", "/v1/rate/allow", serveapi.RateAllow{Requests: v.limits, Peek: true})
		out.Limits = &panel{Status: st, Body: b}
	}
	if v.idemList {
		out.Idem = d.idemPanel(ctx, p)
	}
	return out
}

// electionsPages bounds the pages of election leases one snapshot reads.
const electionsPages = 10

// electionsPanel lists the led elections (the held leases election/NAME)
// as listLeases shows them to p. Ended elections keep records that list
// before led ones, so it reads up to electionsPages pages of leasePage and
// keeps the held leases; Next names where it stopped when more were left.
func (d *dashboard) electionsPanel(ctx context.Context, p principal) *panel {
	out := serveapi.LeaseList{Leases: []serveapi.LeaseInfo{}}
	q := url.Values{"prefix": {election.KeyPrefix}, "limit": {strconv.Itoa(leasePage)}}
	for range electionsPages {
		st, b := d.call(ctx, p, "listLeases", "/v1/leases?"+q.Encode(), nil)
		if st != http.StatusOK {
			return &panel{Status: st, Body: b}
		}
		var page serveapi.LeaseList
		if err := json.Unmarshal(b, &page); err != nil {
			return problemPanel(serveapi.NewProblem(serveapi.TypeInternal, "the elections could not be read"))
		}
		for _, l := range page.Leases {
			if l.Held {
				out.Leases = append(out.Leases, l)
			}
		}
		out.Next = page.Next
		if page.Next == "" {
			break
		}
		q.Set("after", page.Next)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return problemPanel(serveapi.NewProblem(serveapi.TypeInternal, "the elections could not be encoded"))
	}
	return &panel{Status: http.StatusOK, Body: b}
}

// problemPanel is a panel that reports pr.
func problemPanel(pr serveapi.Problem) *panel {
	b, _ := json.Marshal(pr)
	return &panel{Status: pr.Status, Body: b}
}

// poll is one panel's snapshot, shared by every stream of one token that
// watches the same view within a refresh interval.
type poll struct {
	mu sync.Mutex // held while the snapshot is read
	at time.Time
	b  []byte
}

// reads is how many store reads a snapshot of v makes, what a stream is
// charged for it.
func (v view) reads() int {
	n := len(v.keys)
	for _, on := range []bool{v.listLeases, v.user != "", v.job != "", len(v.limits) > 0, v.idemList} {
		if on {
			n++
		}
	}
	return max(n, 1)
}

// key names v canonically, for sharing polls.
func (v view) key() string {
	b, _ := json.Marshal([]any{v.prefix, v.user, v.job, v.listLeases, v.idemList, v.keys, v.limits})
	return string(b)
}

// sharedSnapshot returns the snapshot of v for p: the one another stream
// of the same token read less than half a refresh ago, or a new one, for
// which the token is charged the store reads it makes (unless paid,
// the first of a stream, which its request paid for). limited > 0 says
// the token is over its limit and nothing was read.
func (d *dashboard) sharedSnapshot(ctx context.Context, p principal, v view, paid bool) (b []byte, limited time.Duration, err error) {
	k := p.t.name + "\x00" + v.key()
	s := d.s
	s.pollMu.Lock()
	if s.polls == nil {
		s.polls = map[string]*poll{}
	}
	pl := s.polls[k]
	if pl == nil {
		pl = &poll{}
		s.polls[k] = pl
		if len(s.polls) > 256 {
			for pk, o := range s.polls {
				if o != pl && o.mu.TryLock() {
					if time.Since(o.at) > 2*d.refresh {
						delete(s.polls, pk)
					}
					o.mu.Unlock()
				}
			}
		}
	}
	s.pollMu.Unlock()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.b != nil && time.Since(pl.at) < d.refresh/2 {
		return pl.b, 0, nil
	}
	if !paid {
		if ok, wait := s.charge(ctx, p.t.name, v.reads()); !ok {
			return nil, max(wait, time.Millisecond), nil
		}
	}
	b, err = json.Marshal(d.snapshot(ctx, p, v))
	if err != nil {
		return nil, 0, err
	}
	pl.b, pl.at = b, time.Now()
	return b, 0, nil
}

// dashSession is a session as the dashboard lists it: when it was made
// and when it ends, its ID and the short form of it the CLI and the logs
// print (session.ID.Short), never what it holds (nor, as the API never
// does, its token).
type dashSession struct {
	ID            string    `json:"id"`
	Short         string    `json:"short"`
	UserID        string    `json:"user_id"`
	Version       uint64    `json:"version"`
	Created       time.Time `json:"created"`
	IdleUntil     time.Time `json:"idle_until"`
	AbsoluteUntil time.Time `json:"absolute_until"`
}

// withoutSessionData turns a listSessions answer into the dashboard's
// list (dashSession): without the sessions' data, with their short IDs.
func withoutSessionData(pn *panel) json.RawMessage {
	if pn.Status != http.StatusOK {
		return pn.Body
	}
	var l serveapi.SessionList
	if err := json.Unmarshal(pn.Body, &l); err != nil {
		return pn.Body
	}
	out := struct {
		Sessions []dashSession `json:"sessions"`
	}{make([]dashSession, 0, len(l.Sessions))}
	for _, r := range l.Sessions {
		out.Sessions = append(out.Sessions, dashSession{ID: r.ID, Short: session.ID(r.ID).Short(), UserID: r.UserID, Version: r.Version,
			Created: r.Created, IdleUntil: r.IdleUntil, AbsoluteUntil: r.AbsoluteUntil})
	}
	b, _ := json.Marshal(out)
	return b
}

// events streams snapshots of what the query watches (server-sent
// events), one per refresh interval, until the client goes away, the
// login session ends (an event "logout" then closes the stream), the
// server drains, or streamLife passes (the browser reconnects by itself).
func (d *dashboard) events(w http.ResponseWriter, r *http.Request, p principal) {
	v, err := parseView(r.URL.Query())
	if err != nil {
		fail(w, invalidf("%v", err))
		return
	}
	release, ok := d.s.hold("stream", p.t.name, d.s.cfg.MaxStreams)
	if !ok {
		writeProblem(w, serveapi.NewProblem(serveapi.TypeRateLimited,
			fmt.Sprintf("token %q has %d live streams open already (max_streams)", p.t.name, d.s.cfg.MaxStreams)))
		return
	}
	defer release()
	sess := session.FromContext(r.Context())
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", d.refresh.Milliseconds())
	ctx := r.Context()
	end := time.NewTimer(streamLife)
	defer end.Stop()
	// Ticks fall on multiples of the refresh interval, so that streams
	// watching the same panel read it at the same instants and share the
	// read.
	tick := time.NewTimer(time.Until(time.Now().Truncate(d.refresh).Add(d.refresh)))
	defer tick.Stop()
	first := true // the request that opened the stream paid for it
	for {
		// The server's write timeout bounds a whole response: move it on
		// with every event.
		rc.SetWriteDeadline(time.Now().Add(d.refresh + 30*time.Second))
		if _, err := d.logins.Load(ctx, sess.ID(), 0); err != nil {
			if errors.Is(err, session.ErrNotFound) {
				io.WriteString(w, "event: logout\ndata: {}\n\n")
				rc.Flush()
			}
			return
		}
		b, limited, err := d.sharedSnapshot(ctx, p, v, first)
		first = false
		if err != nil {
			return
		}
		if limited > 0 {
			// Over the token's rate limit: no store read this time.
			_, err = fmt.Fprintf(w, "event: limited\ndata: {\"retry_after\":%q}\n\n", limited.Round(time.Millisecond).String())
		} else {
			_, err = fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b)
		}
		if err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-d.s.draining:
			return
		case <-end.C:
			return
		case <-tick.C:
			tick.Reset(time.Until(time.Now().Truncate(d.refresh).Add(d.refresh)))
		}
	}
}

// canSettle reports whether the idempotency store lists and settles
// records for an operator.
func (s *Server) canSettle() bool {
	_, ok := s.idemAdmin()
	return ok
}

// canList reports whether the lease store lists its keys.
func (s *Server) canList() bool { return listView.has(&s.st) }
