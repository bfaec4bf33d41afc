package idempotency

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
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
	"time"
	"unicode/utf8"
)

// Header names of the IETF Idempotency-Key draft.
const (
	// HeaderKey carries the client's key, an RFC 8941 sf-string.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a replayed response.
	HeaderReplayed = "Idempotent-Replayed"
)

// DefaultMaxBodyBytes is the default HTTPOptions.MaxBodyBytes.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxRecordBytes is the default HTTPOptions.MaxRecordBytes.
const DefaultMaxRecordBytes = 1 << 20

// DefaultReplayHeaders are the response headers replayed by default:
// those that describe the representation or the created resource. Headers
// that carry secrets or per-response state (Set-Cookie, Date, tracing
// headers) are not replayed.
var DefaultReplayHeaders = []string{
	"Content-Type", "Content-Encoding", "Content-Language", "Content-Location", "Content-Disposition",
	"Location", "ETag", "Last-Modified", "Cache-Control", "Link",
}

// HTTPOptions configure Keeper.Middleware. Nil means the defaults
// documented on each field.
type HTTPOptions struct {
	// Methods are the methods the middleware applies to; others pass
	// through untouched. Default POST and PATCH.
	Methods []string
	// Optional lets a request without an Idempotency-Key through
	// unprotected. Default false: such a request is refused with 400.
	Optional bool
	// Principal returns who makes the request (the authenticated user or
	// client), part of every record's scope, so that two principals' equal
	// keys never meet. Set it whenever requests are authenticated.
	//
	// Default (nil, and Anonymous false): the principal is a keyed SHA-256
	// digest (HMAC with CredentialKey) of the request's Authorization and
	// Cookie header lines, so that requests with other credentials never
	// share a record. Requests without either header share one scope per
	// route. A client whose credentials change (a refreshed token, a new
	// cookie) gets new records.
	Principal func(r *http.Request) string
	// Anonymous puts every request of a route in one scope, whoever sends
	// it: a second client sending the same key and body gets the first
	// client's recorded response. Use it only for routes whose responses
	// carry nothing private. It may not be set together with Principal.
	Anonymous bool
	// CredentialKey keys the default principal's digest of the
	// credentials (HMAC-SHA256), so that someone who reads the store cannot
	// test guesses of a credential against it. Give every instance of a
	// service the same key, kept secret. Default: a fixed key, which still
	// separates credentials but does not stop such guessing.
	CredentialKey []byte
	// Route returns the operation, the other part of the scope. Default:
	// the ServeMux pattern that matched (r.Pattern, with the method put in
	// front if the pattern has none), or the method and the URL path when
	// there is no pattern.
	Route func(r *http.Request) string
	// MaxRecordBytes is the largest response body recorded for replay. A
	// larger response still goes out to the client in full as the handler
	// writes it (streamed: at most MaxRecordBytes of it are held in
	// memory), but only its status is recorded: a retry with the same key
	// gets 409 with ErrResponseNotRecorded, and the handler does not run
	// again. Default (0) 1 MiB; negative is refused.
	MaxRecordBytes int64
	// MaxBodyBytes is the largest request body read for the fingerprint;
	// a larger one is refused with 413. Default (0) 1 MiB; negative is
	// refused.
	MaxBodyBytes int64
	// Fingerprint digests the request's input. Default: SHA-256 over the
	// method, the request URI, the Content-Type and the body.
	Fingerprint func(r *http.Request, body []byte) string
	// ReplayHeaders are the response headers recorded and replayed (as
	// the handler set them at WriteHeader). Default DefaultReplayHeaders.
	ReplayHeaders []string
	// Record reports whether a response with status is recorded and
	// replayed to retries. A response that is not recorded releases the
	// key: a retry with it runs the handler again. Default
	// RecordDefault: every status except 5xx and the transient 408, 409,
	// 425 and 429 (a 429 from a rate limiter inside the middleware must not
	// be replayed for the whole retention). 5xx responses are never
	// recorded, whatever Record says.
	Record func(status int) bool
	// StrictKey accepts only the IETF draft's form of the header, an
	// RFC 8941 sf-string (Idempotency-Key: "abc"). Default false: a
	// bare token as common client SDKs send it (Idempotency-Key: abc) is
	// accepted as well and names the same key as its quoted form.
	StrictKey bool
	// Error writes a refusal (status 400, 409, 413, 422, 500 or 503).
	// Default: an application/problem+json body with the status's title
	// and a detail that never includes the scope (it holds the principal);
	// for 409 in progress, Retry-After is already set.
	Error func(w http.ResponseWriter, r *http.Request, status int, err error)
}

// Errors the middleware refuses a request with, passed to
// HTTPOptions.Error.
var (
	// ErrMissingKey: the method needs an Idempotency-Key and none came.
	ErrMissingKey = errors.New("idempotency: missing Idempotency-Key header")
	// ErrBadKey: the header is not one sf-string of 1 to 255 bytes.
	ErrBadKey = errors.New("idempotency: malformed Idempotency-Key header")
	// ErrBodyTooLarge: the request body exceeds HTTPOptions.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("idempotency: request body too large")
	// ErrResponseNotRecorded: a request with this key was processed, but
	// its response exceeded HTTPOptions.MaxRecordBytes and cannot be
	// replayed (answered with 409).
	ErrResponseNotRecorded = errors.New("idempotency: the request was processed, but its response was too large to record and cannot be replayed")
)

// errNotRecorded makes Do release the claim of a response that is not
// recorded (5xx, or a status HTTPOptions.Record refuses).
var errNotRecorded = errors.New("idempotency: the handler's response is not recorded")

// RecordDefault is the default HTTPOptions.Record: every status below 500
// except 408 Request Timeout, 409 Conflict, 425 Too Early and 429 Too Many
// Requests, which say "try again" and would otherwise be replayed to every
// retry.
func RecordDefault(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

type claimKey struct{}

// ClaimFromContext returns the claim of the request being handled by the
// middleware (for its fence), if any.
func ClaimFromContext(ctx context.Context) (*Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(*Claim)
	return c, ok
}

// ParseKey parses the Idempotency-Key field lines of a request: exactly one
// line holding either one RFC 8941 sf-string (no parameters) of 1 to
// MaxKeyLen bytes once unescaped, or a bare token of 1 to MaxKeyLen visible
// ASCII bytes without quotes, commas or semicolons, as client SDKs commonly
// send it. `abc` and `"abc"` name the same key. It returns ErrMissingKey
// without a line, and an error wrapping ErrBadKey for anything else.
func ParseKey(lines []string) (string, error) {
	if len(lines) == 1 {
		if v := strings.Trim(lines[0], " \t"); v != "" && v[0] != '"' {
			return parseBareKey(v)
		}
	}
	return ParseKeyStrict(lines)
}

// parseBareKey checks an unquoted key.
func parseBareKey(v string) (string, error) {
	if len(v) > MaxKeyLen {
		return "", fmt.Errorf("%w: key must be 1 to %d bytes, got %d", ErrBadKey, MaxKeyLen, len(v))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == ',' || c == ';' || c == '\\' {
			return "", fmt.Errorf("%w: byte %#x is not allowed in an unquoted key", ErrBadKey, c)
		}
	}
	return v, nil
}

// ParseKeyStrict is ParseKey that accepts only the sf-string form of the
// IETF draft (HTTPOptions.StrictKey).
func ParseKeyStrict(lines []string) (string, error) {
	switch len(lines) {
	case 0:
		return "", ErrMissingKey
	case 1:
	default:
		return "", fmt.Errorf("%w: %d header lines, want one", ErrBadKey, len(lines))
	}
	v := strings.Trim(lines[0], " ")
	if len(v) < 2 || v[0] != '"' {
		return "", fmt.Errorf("%w: not an sf-string (want a quoted string)", ErrBadKey)
	}
	var b strings.Builder
	i := 1
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape", ErrBadKey)
			}
			b.WriteByte(v[i])
			continue
		case c == '"':
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: byte %#x is not allowed in an sf-string", ErrBadKey, c)
		default:
			b.WriteByte(c)
			continue
		}
		break
	}
	if i >= len(v) {
		return "", fmt.Errorf("%w: unterminated string", ErrBadKey)
	}
	if rest := v[i+1:]; rest != "" {
		return "", fmt.Errorf("%w: unexpected %q after the string (one key, no parameters)", ErrBadKey, rest)
	}
	key := b.String()
	if key == "" || len(key) > MaxKeyLen {
		return "", fmt.Errorf("%w: key must be 1 to %d bytes, got %d", ErrBadKey, MaxKeyLen, len(key))
	}
	return key, nil
}

// Middleware returns the HTTP middleware ([Middleware.Handler]) that runs
// each request with an Idempotency-Key at most once per record (IETF draft
// httpapi-idempotency-key-header):
//
//   - the methods in HTTPOptions.Methods (POST, PATCH) need a key: missing
//     400 (unless Optional), malformed or repeated 400;
//   - a body over MaxBodyBytes 413; the same key with another payload
//     (fingerprint) 422; while the first request runs 409 with Retry-After
//     (or, with Options.Wait, the duplicate waits and gets the replay);
//     an earlier attempt whose outcome is unknown 409; the store
//     unreachable 503, and the handler does not run;
//   - the first response is passed through as the handler writes it and
//     recorded: status, the ReplayHeaders and the body, byte for byte.
//     Repeats get that recording with Idempotent-Replayed: true;
//   - a 5xx response, a status HTTPOptions.Record does not record (by
//     default 408, 409, 425 and 429) or a panic releases the claim: a
//     retry runs the handler again;
//   - a response body over MaxRecordBytes goes out in full but only its
//     status is recorded: repeats get 409 (ErrResponseNotRecorded);
//   - the record's scope is the principal (HTTPOptions.Principal, or by
//     default a keyed digest of the Authorization and Cookie headers) and
//     the route, so equal keys of two users, or of two routes, never meet.
//
// The handler runs with the claim in its request context (see
// ClaimFromContext), cancelled if the claim is lost.
//
// Options out of range (a negative MaxBodyBytes or MaxRecordBytes,
// Anonymous together with Principal) or a nil Keeper give an error
// wrapping ErrInvalid.
func (k *Keeper) Middleware(o *HTTPOptions) (*Middleware, error) {
	if k == nil || k.s == nil {
		return nil, fmt.Errorf("%w: idempotency: nil Keeper (use New)", ErrInvalid)
	}
	m, err := newMiddleware(k, o)
	if err != nil {
		return nil, err
	}
	return &Middleware{m: m}, nil
}

// Middleware is the HTTP middleware of a Keeper, from [Keeper.Middleware]
// or [Keeper.TxMiddleware]. It is safe for concurrent use.
type Middleware struct {
	m *middleware
	// For TxMiddleware: the database and the binder; nil otherwise.
	db   *sql.DB
	bind TxBinder
}

// Handler returns next wrapped by the middleware.
func (mw *Middleware) Handler(next http.Handler) http.Handler {
	if mw.db != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mw.m.serveTx(w, r, next, mw.db, mw.bind) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mw.m.serve(w, r, next) })
}

type middleware struct {
	k       *Keeper
	o       HTTPOptions
	methods map[string]bool
	replay  map[string]bool
	log     *slog.Logger
}

func newMiddleware(k *Keeper, o *HTTPOptions) (*middleware, error) {
	// A response that is not recorded (5xx, or a status Record refuses)
	// releases its claim whatever Options.Errors says: the middleware
	// runs on a copy of k that releases errors.
	kk := *k
	kk.o.Errors = ReleaseErrors
	m := &middleware{k: &kk, log: k.o.Logger}
	if o != nil {
		m.o = *o
	}
	if m.o.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: idempotency: HTTPOptions.MaxBodyBytes %d is negative", ErrInvalid, m.o.MaxBodyBytes)
	}
	if m.o.MaxRecordBytes < 0 {
		return nil, fmt.Errorf("%w: idempotency: HTTPOptions.MaxRecordBytes %d is negative", ErrInvalid, m.o.MaxRecordBytes)
	}
	if m.o.MaxRecordBytes == 0 {
		m.o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if m.o.Anonymous && m.o.Principal != nil {
		return nil, fmt.Errorf("%w: idempotency: HTTPOptions.Anonymous and Principal are both set", ErrInvalid)
	}
	if len(m.o.Methods) == 0 {
		m.o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	m.methods = map[string]bool{}
	for _, meth := range m.o.Methods {
		m.methods[meth] = true
	}
	switch {
	case m.o.Anonymous:
		m.o.Principal = func(*http.Request) string { return "" }
	case m.o.Principal == nil:
		key := m.o.CredentialKey
		if len(key) == 0 {
			key = []byte(defaultCredentialKey)
		}
		key = slices.Clone(key)
		m.o.Principal = func(r *http.Request) string { return credentialPrincipal(key, r) }
	}
	if m.o.Route == nil {
		m.o.Route = defaultRoute
	}
	if m.o.MaxBodyBytes == 0 {
		m.o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if m.o.Fingerprint == nil {
		m.o.Fingerprint = defaultFingerprint
	}
	if m.o.ReplayHeaders == nil {
		m.o.ReplayHeaders = DefaultReplayHeaders
	}
	m.replay = map[string]bool{}
	for _, h := range m.o.ReplayHeaders {
		m.replay[http.CanonicalHeaderKey(h)] = true
	}
	if m.o.Error == nil {
		m.o.Error = writeProblem
	}
	if m.o.Record == nil {
		m.o.Record = RecordDefault
	}
	return m, nil
}

func defaultRoute(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.Pattern, r.Method+" "):
		return r.Pattern
	case r.Pattern != "":
		return r.Method + " " + r.Pattern
	}
	return r.Method + " " + r.URL.EscapedPath()
}

func defaultFingerprint(r *http.Request, body []byte) string {
	return Fingerprint([]byte(r.Method), []byte(r.URL.RequestURI()), []byte(r.Header.Get("Content-Type")), body)
}

// defaultCredentialKey keys the default principal's digest when
// HTTPOptions.CredentialKey is empty.
const defaultCredentialKey = "tenure idempotency credentials v1"

// credentialPrincipal is the default principal: an HMAC-SHA256 of the
// request's Authorization and Cookie header lines, each length-prefixed.
func credentialPrincipal(key []byte, r *http.Request) string {
	mac := hmac.New(sha256.New, key)
	var n [8]byte
	for _, name := range []string{"Authorization", "Cookie"} {
		lines := r.Header.Values(name)
		binary.BigEndian.PutUint64(n[:], uint64(len(lines)))
		mac.Write(n[:])
		for _, v := range lines {
			binary.BigEndian.PutUint64(n[:], uint64(len(v)))
			mac.Write(n[:])
			mac.Write([]byte(v))
		}
	}
	return "credentials:" + hex.EncodeToString(mac.Sum(nil))
}

// scope joins principal and route into a valid scope, injectively: two
// different (principal, route) pairs never give the same scope. When both
// are valid UTF-8 without NUL and the result fits in MaxScopeLen, it is
// "len(principal):principal route" (which starts with a digit); otherwise
// it is "sha256:" and the hex SHA-256 of the length-prefixed principal and
// the route.
func scope(principal, route string) string {
	s := strconv.Itoa(len(principal)) + ":" + principal + " " + route
	if len(s) <= MaxScopeLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(principal)))
	h.Write(n[:])
	h.Write([]byte(principal))
	h.Write([]byte(route))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// admission is what prepare decided about a request.
type admission int

const (
	admitRefused     admission = iota // a refusal was written
	admitPass                         // the method is not protected
	admitUnprotected                  // Optional, and no key came
	admitProtected                    // run under the returned Request
)

// prepare checks a request's key and body and returns its Request, or
// writes the refusal (400, 413).
func (m *middleware) prepare(w http.ResponseWriter, r *http.Request) (Request, admission) {
	if !m.methods[r.Method] {
		return Request{}, admitPass
	}
	lines := r.Header.Values(HeaderKey)
	if len(lines) == 0 && m.o.Optional {
		return Request{}, admitUnprotected
	}
	parse := ParseKey
	if m.o.StrictKey {
		parse = ParseKeyStrict
	}
	key, err := parse(lines)
	if err != nil {
		m.o.Error(w, r, http.StatusBadRequest, err)
		return Request{}, admitRefused
	}
	if r.ContentLength > m.o.MaxBodyBytes {
		m.o.Error(w, r, http.StatusRequestEntityTooLarge, ErrBodyTooLarge)
		return Request{}, admitRefused
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, m.o.MaxBodyBytes+1))
		if err != nil {
			m.o.Error(w, r, http.StatusBadRequest, fmt.Errorf("idempotency: reading the request body: %w", err))
			return Request{}, admitRefused
		}
		if int64(len(body)) > m.o.MaxBodyBytes {
			m.o.Error(w, r, http.StatusRequestEntityTooLarge, ErrBodyTooLarge)
			return Request{}, admitRefused
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return Request{
		Scope:       scope(m.o.Principal(r), m.o.Route(r)),
		Key:         key,
		Fingerprint: m.o.Fingerprint(r, body),
	}, admitProtected
}

// recorded reports whether a response with status is recorded (and, in
// a transaction, committed).
func (m *middleware) recorded(status int) bool { return status < 500 && m.o.Record(status) }

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	req, adm := m.prepare(w, r)
	switch adm {
	case admitRefused:
		return
	case admitPass, admitUnprotected:
		next.ServeHTTP(w, r)
		return
	}
	ran := false
	res, err := m.k.Do(r.Context(), req, func(ctx context.Context, c *Claim) ([]byte, error) {
		ran = true
		rec := &recorder{w: w, replay: m.replay, limit: m.o.MaxRecordBytes}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, claimKey{}, c)))
		rec.finish()
		if !m.recorded(rec.status) {
			return nil, errNotRecorded
		}
		if rec.overflow {
			m.log.WarnContext(r.Context(), "idempotency: the response exceeds MaxRecordBytes; only its status is recorded",
				"key", req.Key, "status", rec.status)
			return encodeNotRecorded(rec.status), nil
		}
		return encodeResponse(rec.status, rec.headers, rec.body.Bytes()), nil
	})
	switch {
	case err == nil && res.Replayed:
		m.writeReplay(w, r, req, res.Value)
		return
	case err == nil, errors.Is(err, errNotRecorded):
		return // the handler's response went out as it was written
	case ran:
		// The response went out, but its record did not land.
		m.log.WarnContext(r.Context(), "idempotency: the response was sent but not recorded",
			"scope", req.Scope, "key", req.Key, "err", err)
		return
	}
	m.refuse(w, r, err)
}

// writeReplay writes a recorded response.
func (m *middleware) writeReplay(w http.ResponseWriter, r *http.Request, req Request, value []byte) {
	if err := writeReplay(w, value); errors.Is(err, ErrResponseNotRecorded) {
		w.Header().Set(HeaderReplayed, "true")
		m.o.Error(w, r, http.StatusConflict, err)
	} else if err != nil {
		m.log.ErrorContext(r.Context(), "idempotency: a recorded response cannot be decoded",
			"scope", req.Scope, "key", req.Key, "err", err)
		m.o.Error(w, r, http.StatusInternalServerError, err)
	}
}

// refuse answers a request the handler did not run for: 422, 409, 503 or
// 500.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, err error) {
	var ip *InProgressError
	switch {
	case errors.Is(err, ErrMismatch):
		m.o.Error(w, r, http.StatusUnprocessableEntity, err)
	case errors.As(err, &ip):
		w.Header().Set("Retry-After", strconv.FormatInt(max(int64((ip.RetryAfter+time.Second-1)/time.Second), 1), 10))
		m.o.Error(w, r, http.StatusConflict, err)
	case errors.Is(err, ErrOutcomeUnknown):
		m.o.Error(w, r, http.StatusConflict, err)
	case errors.Is(err, ErrUnavailable):
		m.o.Error(w, r, http.StatusServiceUnavailable, err)
	default:
		m.o.Error(w, r, http.StatusInternalServerError, err)
	}
}

// publicDetail is what a client is told about err: the sentinel's text
// (never the scope, which holds the principal), or the key syntax error.
func publicDetail(err error) string {
	for _, e := range []error{ErrMismatch, ErrInProgress, ErrOutcomeUnknown, ErrUnavailable, ErrResponseNotRecorded} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	for _, e := range []error{ErrMissingKey, ErrBadKey, ErrBodyTooLarge} {
		if errors.Is(err, e) {
			return err.Error()
		}
	}
	return "idempotency: internal error"
}

// writeProblem writes an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": publicDetail(err),
	})
}

// recorder passes the handler's response through and records it, holding
// at most limit bytes of its body: past that it drops what it holds and
// only passes the rest through.
type recorder struct {
	w        http.ResponseWriter
	replay   map[string]bool
	limit    int64
	status   int
	headers  [][2]string
	body     bytes.Buffer
	overflow bool
}

func (rc *recorder) Header() http.Header { return rc.w.Header() }

func (rc *recorder) WriteHeader(code int) {
	if rc.status != 0 {
		rc.w.WriteHeader(code) // net/http reports the superfluous call
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		rc.w.WriteHeader(code) // informational: not the final status
		return
	}
	rc.status = code
	names := make([]string, 0, len(rc.w.Header()))
	for name := range rc.w.Header() {
		if rc.replay[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range rc.w.Header()[name] {
			rc.headers = append(rc.headers, [2]string{name, v})
		}
	}
	rc.w.WriteHeader(code)
}

func (rc *recorder) Write(b []byte) (int, error) {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	if !rc.overflow {
		if int64(rc.body.Len())+int64(len(b)) > rc.limit {
			rc.overflow = true
			rc.body = bytes.Buffer{} // let the partial copy go
		} else {
			rc.body.Write(b)
		}
	}
	return rc.w.Write(b)
}

// Flush sends buffered data to the client.
func (rc *recorder) Flush() {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(rc.w).Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (rc *recorder) Unwrap() http.ResponseWriter { return rc.w }

func (rc *recorder) finish() {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
}

// responseMagic starts a recorded response (format version 1).
const responseMagic = "tnr1"

// notRecordedMagic starts the record of a response too large to record:
// the magic and the status (2 bytes).
const notRecordedMagic = "tnr0"

func encodeNotRecorded(status int) []byte {
	return binary.BigEndian.AppendUint16([]byte(notRecordedMagic), uint16(status))
}

// encodeResponse records status, headers and body: the magic, the status
// (2 bytes), the header count, each name and value length-prefixed
// (uvarint), then the body.
func encodeResponse(status int, headers [][2]string, body []byte) []byte {
	n := len(responseMagic) + 2 + binary.MaxVarintLen64 + len(body)
	for _, h := range headers {
		n += 2*binary.MaxVarintLen64 + len(h[0]) + len(h[1])
	}
	b := make([]byte, 0, n)
	b = append(b, responseMagic...)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, h := range headers {
		b = binary.AppendUvarint(b, uint64(len(h[0])))
		b = append(b, h[0]...)
		b = binary.AppendUvarint(b, uint64(len(h[1])))
		b = append(b, h[1]...)
	}
	return append(b, body...)
}

var errRecording = errors.New("idempotency: malformed recorded response")

func decodeResponse(b []byte) (status int, headers [][2]string, body []byte, err error) {
	if len(b) == len(notRecordedMagic)+2 && string(b[:len(notRecordedMagic)]) == notRecordedMagic {
		return int(binary.BigEndian.Uint16(b[len(notRecordedMagic):])), nil, nil, ErrResponseNotRecorded
	}
	if len(b) < len(responseMagic)+3 || string(b[:len(responseMagic)]) != responseMagic {
		return 0, nil, nil, errRecording
	}
	b = b[len(responseMagic):]
	status = int(binary.BigEndian.Uint16(b))
	b = b[2:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return 0, nil, nil, errRecording
	}
	b = b[n:]
	str := func() (string, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return "", false
		}
		s := string(b[n : n+int(l)])
		b = b[n+int(l):]
		return s, true
	}
	for range count {
		name, ok1 := str()
		value, ok2 := str()
		if !ok1 || !ok2 {
			return 0, nil, nil, errRecording
		}
		headers = append(headers, [2]string{name, value})
	}
	return status, headers, b, nil
}

func writeReplay(w http.ResponseWriter, rec []byte) error {
	status, headers, body, err := decodeResponse(rec)
	if err != nil {
		return err
	}
	h := w.Header()
	for _, kv := range headers {
		h.Add(kv[0], kv[1])
	}
	h.Set(HeaderReplayed, "true")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}
