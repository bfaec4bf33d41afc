package server

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

// FencedKV is a value guarded by fences, kept by the server for resources
// that have no guard of their own (fencedHolderWrite, fencedWrite,
// fencedRead). tenure serve
// builds it from the store it opened.
type FencedKV interface {
	// FencedWrite sets name to value if fence is greater than every fence
	// admitted for name before; otherwise it returns an error wrapping
	// fence.ErrStale and changes nothing.
	FencedWrite(ctx context.Context, name string, fence uint64, value []byte) error
	// HolderWrite sets name to value only while l holds its key (token,
	// fence and expiry checked on the store's clock, atomically with the
	// write) and l's fence is at least every fence admitted for name;
	// otherwise it returns an error wrapping lease.ErrNotHeld (or
	// fence.ErrStale) and changes nothing. l is usually a lease.Remote.
	HolderWrite(ctx context.Context, l *lease.Lease, name string, value []byte) error
	// FencedRead returns name's value and the greatest fence admitted for
	// it (nil, 0 if never written).
	FencedRead(ctx context.Context, name string) ([]byte, uint64, error)
}

// SessionKV keeps values of a user that change only while one of the
// user's sessions is live, checked at the write in one atomic step
// (writeSessionValue, readSessionValue): a sensitive change (a balance, a
// role) that must not land once the user logged out. tenure serve builds
// it from the store it opened.
type SessionKV interface {
	// SessionWrite sets userID's value name to value if session id is live
	// and, when version is not 0, still at version when the write lands. A
	// session that ended gets an error wrapping session.ErrNotFound, one at
	// another version session.ErrConflict, and nothing changes.
	SessionWrite(ctx context.Context, id session.ID, version uint64, userID, name string, value []byte) error
	// SessionRead returns userID's value name and whether it was ever
	// written.
	SessionRead(ctx context.Context, userID, name string) ([]byte, bool, error)
}

// Stores are the primitives' store views the server serves. A nil view
// answers its routes with a not_supported problem.
type Stores struct {
	Leases      lease.Store
	Idempotency idempotency.Store
	Limits      ratelimit.Store
	Sessions    session.Store
	Schedules   schedule.Store
	Fenced      FencedKV
	// SessionValues keeps the values writeSessionValue checks against a
	// session.
	SessionValues SessionKV
}

// AccessLog selects the requests Options.Logger gets a line for.
type AccessLog int

// The access log modes. A request that failed on the server's side is
// logged in every mode.
const (
	// AccessLogFull logs every request.
	AccessLogFull AccessLog = iota
	// AccessLogSampled logs one request in Options.AccessLogSample.
	AccessLogSampled
	// AccessLogOff logs no request that succeeded or was refused.
	AccessLogOff
)

// DefaultAccessLogSample is Options.AccessLogSample when zero.
const DefaultAccessLogSample = 100

// ParseAccessLog reads "full", "sampled" or "off".
func ParseAccessLog(s string) (AccessLog, error) {
	switch s {
	case "full":
		return AccessLogFull, nil
	case "sampled":
		return AccessLogSampled, nil
	case "off":
		return AccessLogOff, nil
	}
	return 0, fmt.Errorf("%w: access log %q: want full, sampled or off", ErrConfig, s)
}

// Options configure a Server. Nil means the defaults.
type Options struct {
	// Config holds the tokens and limits. Default: no tokens (every API
	// request is refused) and Config's defaults.
	Config *Config
	// Logger receives one line per API request (operation, status, token
	// name, duration; never a token or a body), as AccessLog says, and
	// the server's warnings. Default slog.Default().
	Logger *slog.Logger
	// AccessLog says which requests get a log line. Default AccessLogFull
	// (every request). A request that failed on the server's side (a
	// store error, logged at WARN with its request ID) is logged
	// whatever it says.
	AccessLog AccessLog
	// AccessLogSample is the N of AccessLogSampled: one request in N is
	// logged. Default DefaultAccessLogSample.
	AccessLogSample int
	// Metrics serves /metrics (tenure serve passes the OpenTelemetry
	// Prometheus exporter's handler). Default: /metrics is not served.
	Metrics http.Handler
	// Ready reports whether the store is reachable, for /readyz. Default:
	// an Inspect of a lease key on Stores.Leases.
	Ready func(ctx context.Context) error
	// APILimits keeps the API's own per-token rate limit state. Default
	// Stores.Limits. tenure serve passes an in-process store, so that the
	// limit costs no store round trip (each instance then limits on its
	// own).
	APILimits ratelimit.Store
	// MeterProvider supplies tenure.serve.requests. Default the global
	// provider.
	MeterProvider metric.MeterProvider
	// UIPath is the path the dashboard is served under; it must start and
	// end with "/". "/" redirects to it. Default "/ui/".
	UIPath string
	// UIRefresh is how often the dashboard's live views are refreshed
	// (one server-sent event per interval), from 100ms to 1m. Default
	// DefaultUIRefresh (1s).
	UIRefresh time.Duration
	// HTTPS reports that browsers reach the server over HTTPS (tenure
	// serve sets it with --tls-cert). The dashboard's login cookie is then
	// SecureDashboardCookieName with the Secure attribute; otherwise it is
	// DashboardCookieName without it, since a browser drops a Secure
	// cookie set over plain HTTP. Default false.
	HTTPS bool
	// Version, when set, is printed by /healthz after "ok" (tenure serve
	// passes its version, schema versions and Redis script set), so that
	// a probe or an operator sees which build answers. Default "": /healthz
	// prints only "ok".
	Version string
}

// Server is tenure's HTTP API. It is an http.Handler.
type Server struct {
	st      Stores
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	tokens  []authToken
	limiter *ratelimit.Limiter
	// held counts each token's long-lived requests (streams, waits).
	heldMu sync.Mutex
	held   map[string]int
	// polls are the dashboard snapshots shared by the viewers of one
	// panel (one token, one view) within a refresh interval.
	pollMu   sync.Mutex
	polls    map[string]*poll
	ready    func(ctx context.Context) error
	requests metric.Int64Counter
	// reqAttrs holds requests' attribute option of each operation and
	// status code seen (requestKey -> metric.AddOption).
	reqAttrs  sync.Map
	accessLog AccessLog
	sampleN   uint64
	logged    atomic.Uint64
	// tel records the metrics contract's instruments for API operations;
	// nil when the meter provider is the no-op one.
	tel *apiTelemetry

	// handlers are the operations' handlers by operation ID, for the
	// dashboard's in-process calls.
	handlers map[string]handler
	// batchCalls are the calls a batch may carry, by operation ID.
	batchCalls map[string]batchCall
	// onWait, when set (by tests), is called when an acquire starts to
	// wait for a held key.
	onWait func()

	drainOnce sync.Once
	draining  chan struct{}
}

type authToken struct {
	name     string
	sum      [32]byte
	prefixes []string
	ops      map[string]bool
	all      bool
}

// principal is the token a request authenticated with.
type principal struct{ t *authToken }

// New returns a server over st.
func New(st Stores, o *Options) (*Server, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	var cfg Config
	if opt.Config != nil {
		cfg = *opt.Config
		cfg.Tokens = slices.Clone(cfg.Tokens)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MeterProvider == nil {
		opt.MeterProvider = otel.GetMeterProvider()
	}
	s := &Server{st: st, cfg: cfg, log: opt.Logger, mux: http.NewServeMux(), ready: opt.Ready, draining: make(chan struct{})}
	for _, t := range cfg.Tokens {
		at := authToken{name: t.Name, sum: sha256.Sum256([]byte(t.Secret.Reveal())), prefixes: t.Prefixes, ops: map[string]bool{}}
		for _, op := range t.Operations {
			switch op {
			case "*":
				at.all = true
			case "read":
				for _, r := range ReadOps {
					at.ops[r] = true
				}
			default:
				at.ops[op] = true
			}
		}
		s.tokens = append(s.tokens, at)
	}
	lim := opt.APILimits
	if lim == nil {
		lim = st.Limits
	}
	if lim != nil && cfg.Rate > 0 {
		l, err := ratelimit.New(lim, ratelimit.GCRA, ratelimit.Limit{Name: "tenure-serve-api", Rate: cfg.Rate, Period: cfg.Period, Burst: cfg.Burst}, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: rate_limit: %v", ErrConfig, err)
		}
		s.limiter = l
	}
	if s.ready == nil {
		s.ready = func(ctx context.Context) error {
			if st.Leases == nil {
				return nil
			}
			_, err := st.Leases.Inspect(ctx, "tenure/serve/readyz")
			return err
		}
	}
	c, err := opt.MeterProvider.Meter("github.com/tenurekit/tenure/server").Int64Counter("tenure.serve.requests",
		metric.WithDescription("API requests served, by operation and status code"), metric.WithUnit("{request}"))
	if err != nil {
		return nil, err
	}
	s.requests = c
	s.tel = newAPITelemetry(opt.MeterProvider, &s.st)
	if opt.AccessLog < AccessLogFull || opt.AccessLog > AccessLogOff {
		return nil, fmt.Errorf("%w: AccessLog %d unknown", ErrConfig, opt.AccessLog)
	}
	if opt.AccessLogSample < 0 {
		return nil, fmt.Errorf("%w: AccessLogSample %d is negative", ErrConfig, opt.AccessLogSample)
	}
	s.accessLog, s.sampleN = opt.AccessLog, uint64(cmp.Or(opt.AccessLogSample, DefaultAccessLogSample))
	s.routes()
	ui := opt.UIPath
	if ui == "" {
		ui = "/ui/"
	}
	if err := s.mountDashboard(ui, opt); err != nil {
		return nil, err
	}
	health := "ok\n"
	if opt.Version != "" {
		health = "ok " + opt.Version + "\n"
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, health)
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI())
	})
	if opt.Metrics != nil {
		s.mux.Handle("GET /metrics", opt.Metrics)
	}
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

// Mux returns the server's mux, to mount more routes (the dashboard, other
// APIs). Routes mounted on it directly are not authenticated; wrap them
// with Protect.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Protect wraps h with the API's bearer-token authentication, operation
// check, per-token rate limit and body size limit, as operation op (a
// name for logs, metrics and the tokens' operation lists).
func (s *Server) Protect(op string, h http.Handler) http.Handler {
	return s.api(op, func(w http.ResponseWriter, r *http.Request, _ principal) { h.ServeHTTP(w, r) })
}

// Drain makes waiting requests (long polls) answer now with what they
// have, for a graceful shutdown: call it before http.Server.Shutdown.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// isDraining reports whether Drain was called.
func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// HTTPServer returns an http.Server for s on addr with the configured
// timeouts on every phase.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := s.ready(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "store unreachable\n")
		return
	}
	io.WriteString(w, "ok\n")
}

// handler is an API handler: it runs after authentication.
type handler func(w http.ResponseWriter, r *http.Request, p principal)

// statusWriter records the status written and lets
// http.ResponseController reach the writer below (for the dashboard's
// event stream: flushes and deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
	id     string // the request's ID (X-Request-Id)
	err    error  // a cause logged instead of answered
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// newRequestID returns a random request ID: 16 hex digits.
func newRequestID() string {
	var b [8]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// api wraps h: authentication, admission, logging and metrics.
func (s *Server) api(op string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, id: newRequestID()}
		sw.Header().Set("X-Request-Id", sw.id)
		name := "-"
		defer func() { s.logRequest(r, op, sw, name, start) }()
		t := s.authenticate(r)
		if t == nil {
			sw.Header().Set("WWW-Authenticate", `Bearer realm="tenure"`)
			writeProblem(sw, serveapi.NewProblem(serveapi.TypeUnauthorized, "send Authorization: Bearer <token> with a token from the configuration"))
			return
		}
		name = t.name
		if s.admit(sw, r, t, op) {
			h(sw, r, principal{t})
		}
	}
}

// admit checks that token t may call operation op ("" for none: the
// dashboard's own endpoints) and is within its rate limit, and bounds the
// request's body. It writes the problem and returns false otherwise.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, t *authToken, op string) bool {
	// A batch is any token's to send: each of its calls is checked
	// against the token's operations.
	if op != "" && op != "batch" && !t.all && !t.ops[op] {
		writeProblem(w, serveapi.NewProblem(serveapi.TypeForbidden, fmt.Sprintf("token %q may not call %s", t.name, op)))
		return false
	}
	if s.limiter != nil {
		d, err := s.limiter.Allow(r.Context(), t.name)
		if err != nil {
			writeProblem(w, serveapi.NewProblem(serveapi.TypeUnavailable, "the API's rate limit could not be checked"))
			return false
		}
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int((d.RetryAfter+time.Second-1)/time.Second)))
			writeProblem(w, serveapi.NewProblem(serveapi.TypeRateLimited, fmt.Sprintf("token %q is over %d requests per %v", t.name, s.cfg.Rate, s.cfg.Period)))
			return false
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	return true
}

// hold takes one of the limit long-lived requests of kind ("stream",
// "wait") that token may have at once; ok is false when it has them all.
// release gives it back.
func (s *Server) hold(kind, token string, limit int) (release func(), ok bool) {
	k := kind + "\x00" + token
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if s.held == nil {
		s.held = map[string]int{}
	}
	if s.held[k] >= limit {
		return nil, false
	}
	s.held[k]++
	return func() {
		s.heldMu.Lock()
		defer s.heldMu.Unlock()
		if s.held[k]--; s.held[k] <= 0 {
			delete(s.held, k)
		}
	}, true
}

// charge takes n of token's API rate limit for work a request does after
// it was admitted (a stream's later snapshots, a wait's later attempts).
// It reports false, with the time to wait, when the token is over its
// limit; without a limit it always reports true.
func (s *Server) charge(ctx context.Context, token string, n int) (bool, time.Duration) {
	if s.limiter == nil || n <= 0 {
		return true, 0
	}
	d, err := s.limiter.AllowN(ctx, token, n)
	if err != nil {
		return false, time.Second
	}
	return d.Allowed, d.RetryAfter
}

// logRequest writes a request's log line (never a token, only its name)
// and counts it.
func (s *Server) logRequest(r *http.Request, op string, w *statusWriter, token string, start time.Time) {
	s.requests.Add(r.Context(), 1, s.requestAttrs(op, w.status))
	if w.err == nil {
		switch s.accessLog {
		case AccessLogOff:
			return
		case AccessLogSampled:
			if (s.logged.Add(1)-1)%s.sampleN != 0 {
				return
			}
		}
	}
	attrs := []slog.Attr{slog.String("operation", op),
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", w.status),
		slog.String("token", token), slog.Duration("duration", time.Since(start)), slog.String("request_id", w.id)}
	level := slog.LevelInfo
	if w.err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", w.err.Error()))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// requestKey is an operation and a status code.
type requestKey struct {
	op     string
	status int
}

// requestAttrs returns the requests counter's attributes of op and status,
// built once per pair (operations and status codes are few).
func (s *Server) requestAttrs(op string, status int) metric.AddOption {
	k := requestKey{op, status}
	if o, ok := s.reqAttrs.Load(k); ok {
		return o.(metric.AddOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String("operation", op), attribute.Int("status", status)))
	s.reqAttrs.Store(k, o)
	return o
}

// authenticate finds the request's bearer token.
func (s *Server) authenticate(r *http.Request) *authToken {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	return s.tokenFor(strings.TrimSpace(tok))
}

// tokenFor returns the configured token whose secret is secret, or nil.
// Every configured token is compared (in constant time, on SHA-256
// digests), whichever matches.
func (s *Server) tokenFor(secret string) *authToken {
	sum := sha256.Sum256([]byte(secret))
	var found *authToken
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].sum[:]) == 1 {
			found = &s.tokens[i]
		}
	}
	return found
}

// allows reports whether key lies in one of the token's namespaces.
func (p principal) allows(key string) bool {
	for _, pre := range p.t.prefixes {
		if InNamespace(key, pre) {
			return true
		}
	}
	return false
}

// InNamespace reports whether key lies in the namespace ns: a namespace is
// a path segment, not a raw prefix. "" holds every key; one that ends in
// "/", ":" or "." holds the keys that start with it; any other holds the
// key equal to it and the keys that continue it after "/", ":" or "." (so
// "billing" holds "billing" and "billing/42", not "billing-internal/42").
func InNamespace(key, ns string) bool {
	if ns == "" || strings.HasSuffix(ns, "/") || strings.HasSuffix(ns, ":") || strings.HasSuffix(ns, ".") {
		return strings.HasPrefix(key, ns)
	}
	rest, ok := strings.CutPrefix(key, ns)
	return ok && (rest == "" || rest[0] == '/' || rest[0] == ':' || rest[0] == '.')
}

// fail writes the problem of err: the server's own problem, or the one
// of a store error.
func fail(w http.ResponseWriter, err error) {
	p := problemOf(err)
	var pe *problemError
	if (p.Type == serveapi.TypeUnavailable || p.Type == serveapi.TypeInternal) && !errors.As(err, &pe) {
		// A store's error text names addresses, databases and users: it
		// goes to the log with the request's ID, and the answer names
		// the ID.
		p.Detail = "the store did not answer"
		if p.Type == serveapi.TypeInternal {
			p.Detail = "internal error"
		}
		if sw, ok := w.(*statusWriter); ok {
			sw.err = err
			p.Instance = "urn:tenure:request:" + sw.id
			p.Detail += " (request " + sw.id + "; the server's log has the cause)"
		}
	}
	if p.Type == serveapi.TypeInProgress || p.Type == serveapi.TypeHeld {
		if p.TTL > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((p.TTL.D()+time.Second-1)/time.Second)))
		}
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p serveapi.Problem) {
	w.Header().Set("Content-Type", serveapi.ProblemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// The values of the fields every JSON answer carries, shared by all of
// them (a header's values are replaced, never changed in place).
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	b, err := serveapi.Marshal(v)
	w.WriteHeader(status)
	if err == nil {
		w.Write(append(b, '\n'))
	}
}
