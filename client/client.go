package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
)

// ErrInvalid reports a bad base URL or option given to New.
var ErrInvalid = kind.New("client: invalid argument", tenure.ErrInvalid)

// Options configure a Client. Nil means the defaults.
type Options struct {
	// Token is the bearer token the server's configuration gives this
	// client. It is sent on every request and never printed.
	Token string
	// HTTPClient sends the requests. Default: a client of its own on a
	// clone of http.DefaultTransport that keeps up to
	// DefaultMaxIdleConnsPerHost idle connections to the server (instead
	// of net/http's 2, which makes concurrent callers open and close a
	// connection for most requests), without an overall timeout (each
	// call's context bounds it). A client of your own should keep at
	// least as many idle connections per host as it has concurrent
	// callers. Redirects are not followed (the API answers none): a
	// client with no cookie jar, Timeout or CheckRedirect has its
	// requests sent by its Transport directly, others by its Do.
	HTTPClient *http.Client
	// MaxResponseBytes bounds a response body. Default 8 MiB.
	MaxResponseBytes int64
	// MaxInFlight is how many requests the client sends at once for the
	// calls that answer at once (lease, rate limit, permit, fenced write,
	// idempotency and session calls; not an acquire that waits). Calls
	// made while that many are in flight queue, and each request that
	// ends takes what has queued, up to MaxBatchCalls, in one batch
	// request (POST /v1/batch): with many concurrent callers the HTTP
	// round trip is paid once per batch instead of once per call, and a
	// lone caller still sends its call on its own at once. Default
	// DefaultMaxInFlight; a negative value sends every call on a request
	// of its own. A server without the batch operation is detected on
	// the first batch, and the calls are sent one by one from then on.
	MaxInFlight int
}

// DefaultMaxInFlight is the default of Options.MaxInFlight.
const DefaultMaxInFlight = 2

// MaxBatchCalls is the most calls the client puts in one batch request.
const MaxBatchCalls = 64

// DefaultMaxIdleConnsPerHost is the number of idle keep-alive connections
// to the server the default HTTP client keeps (Options.HTTPClient).
const DefaultMaxIdleConnsPerHost = 100

// Client talks to tenure serve. Its views implement the primitives' store
// contracts over the API, so a Locker, Keeper, Limiter or Manager runs on
// it as on any other store. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token secret.Text
	auth  authHeader // the Authorization field's values, nil without a token
	hc    *http.Client
	// rt is the HTTP client's transport, which requests go to directly
	// when the client has no cookie jar, timeout or redirect policy: the
	// API answers no request with a redirect, so http.Client's work per
	// request (a copy of the header for redirects among it) buys nothing.
	// Nil otherwise: the client's Do sends them.
	rt      http.RoundTripper
	maxResp int64
	// batch gathers the calls that queue behind MaxInFlight requests into
	// batch requests; nil when batching is off.
	batch *batcher
}

// authHeader is the Authorization field's values; it prints redacted.
type authHeader []string

// Format prints the field redacted, whatever the verb.
func (authHeader) Format(f fmt.State, _ rune) { io.WriteString(f, "[redacted]") }

// The values of the fields every request carries, shared by all of them
// (net/http replaces a field's values, never changes them in place).
var (
	jsonContentType = []string{"application/json"}
	acceptJSON      = []string{"application/json, application/problem+json"}
)

// readBody reads resp's body, at most limit bytes: into a buffer of the
// announced length when the server gave one.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= limit {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// New returns a client of the server at baseURL (for example
// "http://127.0.0.1:7070"; the API's /v1 paths are added to it).
func New(baseURL string, o *Options) (*Client, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: base URL %q is not an http or https URL", ErrInvalid, baseURL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: base URL carries credentials; give the token in Options.Token", ErrInvalid)
	}
	var rt http.RoundTripper
	if opt.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		if tr.MaxIdleConns < DefaultMaxIdleConnsPerHost {
			tr.MaxIdleConns = DefaultMaxIdleConnsPerHost
		}
		// The API's bodies are small JSON: no Accept-Encoding on every
		// request.
		tr.DisableCompression = true
		opt.HTTPClient = &http.Client{Transport: tr}
	}
	if hc := opt.HTTPClient; hc.Jar == nil && hc.Timeout == 0 && hc.CheckRedirect == nil {
		rt = hc.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
	}
	if opt.MaxResponseBytes <= 0 {
		opt.MaxResponseBytes = 8 << 20
	}
	c := &Client{base: u, token: secret.New(opt.Token), hc: opt.HTTPClient, rt: rt, maxResp: opt.MaxResponseBytes}
	if opt.MaxInFlight == 0 {
		opt.MaxInFlight = DefaultMaxInFlight
	}
	if opt.MaxInFlight > 0 {
		c.batch = &batcher{c: c, max: opt.MaxInFlight}
	}
	if !c.token.IsZero() {
		c.auth = authHeader{"Bearer " + c.token.Reveal()}
	}
	return c, nil
}

// Error is a problem the server answered with (RFC 9457). It unwraps to
// the primitive's error the problem type stands for (lease.ErrNotHeld,
// session.ErrConflict, ...); problems the primitive has no error for
// (unauthorized, forbidden, rate_limited, too_large, not_supported,
// internal) unwrap to its ErrUnavailable, so that callers fail closed.
type Error struct {
	// Type is the problem type URI (serveapi's Type constants, documented
	// in docs/serve.md).
	Type   string
	Status int
	Title  string
	Detail string
	err    error
}

// Error describes the problem.
func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("tenure serve: %d %s: %s", e.Status, e.Title, e.Detail)
	}
	return fmt.Sprintf("tenure serve: %d %s", e.Status, e.Title)
}

// Unwrap returns the primitive's error.
func (e *Error) Unwrap() error { return e.err }

// mapping turns problems into one primitive's errors.
type mapping struct {
	unavailable error
	// of maps a problem to the primitive's error (nil: unavailable).
	of func(p serveapi.Problem) error
}

// transportError is a request that got no answer from the server.
type transportError struct{ err error }

func (e *transportError) Error() string { return "tenure serve unreachable: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// call sends one request (a call that can be batched goes through the
// client's batcher) and decodes the answer into out (nil: none). On
// failure the error wraps the primitive's error as m says.
func (c *Client) call(ctx context.Context, m mapping, method, path string, query url.Values, in, out any) error {
	if op, ok := batchOps[path]; ok && c.batch != nil && method == http.MethodPost && query == nil && in != nil {
		return c.batch.do(ctx, m, path, op, in, out)
	}
	return c.send(ctx, m, method, path, query, in, out)
}

// send is call without the batcher: one request of its own.
func (c *Client) send(ctx context.Context, m mapping, method, path string, query url.Values, in, out any) error {
	var body []byte
	if in != nil {
		b, err := serveapi.Marshal(in)
		if err != nil {
			return errors.Join(m.unavailable, err)
		}
		body = b
	}
	status, problem, b, err := c.roundTrip(ctx, method, path, query, body)
	if err != nil {
		return fmt.Errorf("%w: %w", m.unavailable, &transportError{err})
	}
	return answer(m, method, path, status, problem, b, out)
}

// roundTrip sends one request with body (nil: none) and returns the
// answer's status and body, and whether the body is a problem.
func (c *Client) roundTrip(ctx context.Context, method, path string, query url.Values, body []byte) (status int, problem bool, b []byte, err error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// The URL is set as built, not written out and parsed again.
	req, err := http.NewRequestWithContext(ctx, method, "", rd)
	if err != nil {
		return 0, false, nil, err
	}
	req.URL, req.Host = &u, u.Host
	if body != nil {
		req.Header["Content-Type"] = jsonContentType
	}
	req.Header["Accept"] = acceptJSON
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	var resp *http.Response
	if c.rt != nil {
		resp, err = c.rt.RoundTrip(req)
	} else {
		resp, err = c.hc.Do(req)
	}
	if err != nil {
		return 0, false, nil, err
	}
	defer resp.Body.Close()
	if b, err = readBody(resp, c.maxResp); err != nil {
		return 0, false, nil, err
	}
	return resp.StatusCode, strings.HasPrefix(resp.Header.Get("Content-Type"), serveapi.ProblemContentType), b, nil
}

// answer decodes an answer of status with body b into out (nil: none), or
// returns the error of its problem (problem: b is one) as m maps it.
func answer(m mapping, method, path string, status int, problem bool, b []byte, out any) error {
	if status >= 200 && status < 300 {
		if out == nil || status == http.StatusNoContent {
			return nil
		}
		if err := serveapi.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%w: tenure serve: malformed answer to %s %s: %v", m.unavailable, method, path, err)
		}
		return nil
	}
	var p serveapi.Problem
	if !problem || json.Unmarshal(b, &p) != nil || p.Type == "" {
		p = serveapi.NewProblem(serveapi.TypeUnavailable, fmt.Sprintf("answer %d without a problem body", status))
		p.Status = status
	}
	return problemError(m, p)
}

// problemError is the error of problem p as m maps it.
func problemError(m mapping, p serveapi.Problem) error {
	e := &Error{Type: p.Type, Status: p.Status, Title: p.Title, Detail: p.Detail}
	if p.Type != serveapi.TypeUnavailable {
		e.err = m.of(p)
	}
	if e.err == nil {
		e.err = m.unavailable
	}
	return e
}
