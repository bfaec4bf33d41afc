package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/store/memstore"
)

// payments is a handler that counts its runs and answers 201 with a
// Location, a body, and headers that must not be replayed.
type payments struct {
	runs   atomic.Int32
	status int
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	if c, ok := idempotency.ClaimFromContext(r.Context()); ok {
		w.Header().Set("X-Fence", strconv.FormatUint(c.Fence(), 10))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+strconv.Itoa(int(n)))
	w.Header().Add("Link", `</a>; rel="a"`)
	w.Header().Add("Link", `</b>; rel="b"`)
	w.Header().Set("Set-Cookie", "secret=1")
	w.Header().Set("X-Run", strconv.Itoa(int(n)))
	status := p.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	w.Write([]byte(`{"run":` + strconv.Itoa(int(n)) + `,"echo":`))
	w.Write(append(body, []byte("}\x00\xff")...)) // bytes that are not UTF-8
}

type fixture struct {
	store *memstore.Store
	k     *idempotency.Keeper
	h     *payments
	srv   http.Handler
}

func newFixture(t *testing.T, ko *idempotency.Options, ho *idempotency.HTTPOptions) *fixture {
	t.Helper()
	s := newMem(t, nil)
	f := &fixture{store: s, k: newKeeper(t, s.Idempotency(), ko), h: &payments{}}
	if ho == nil {
		ho = &idempotency.HTTPOptions{}
	}
	if ho.Principal == nil && !ho.Anonymous {
		ho.Principal = func(r *http.Request) string { return r.Header.Get("X-User") }
	}
	mux := http.NewServeMux()
	mw := middleware(t, f.k, ho)
	mux.Handle("POST /payments", mw(f.h))
	mux.Handle("PATCH /payments/{id}", mw(f.h))
	mux.Handle("POST /refunds", mw(f.h))
	mux.Handle("PUT /payments/{id}", mw(f.h))
	mux.Handle("GET /payments", mw(f.h))
	f.srv = mux
	return f
}

func (f *fixture) call(method, path, user, body string, keys ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("X-User", user)
	r.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		r.Header.Add(idempotency.HeaderKey, k)
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w
}

func TestMiddlewareReplaysByteIdentical(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.call("POST", "/payments", "alice", `{"amount":10}`, `"pay-1"`)
	if first.Code != http.StatusCreated || first.Header().Get(idempotency.HeaderReplayed) != "" || first.Header().Get("X-Fence") == "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	for i := range 2 {
		again := f.call("POST", "/payments", "alice", `{"amount":10}`, `"pay-1"`)
		if again.Code != first.Code || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("replay %d: %d %q, want %d %q", i, again.Code, again.Body.Bytes(), first.Code, first.Body.Bytes())
		}
		for _, h := range []string{"Content-Type", "Location", "Link"} {
			if got, want := again.Header().Values(h), first.Header().Values(h); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("replay %d header %s = %q, want %q", i, h, got, want)
			}
		}
		if again.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("replay %d lacks %s: true", i, idempotency.HeaderReplayed)
		}
		if again.Header().Get("Set-Cookie") != "" || again.Header().Get("X-Run") != "" {
			t.Fatalf("replay %d carries headers off the allow list: %v", i, again.Header())
		}
	}
	if f.h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", f.h.runs.Load())
	}
	// The record is scoped by principal and route.
	rec, err := f.store.Idempotency().Inspect(t.Context(), idempotency.ID{Scope: "5:alice POST /payments", Key: "pay-1"})
	if err != nil || !rec.Exists || !rec.Completed {
		t.Fatalf("record %+v %v", rec, err)
	}
}

func TestMiddlewareScopes(t *testing.T) {
	f := newFixture(t, nil, nil)
	a := f.call("POST", "/payments", "alice", `{}`, `"k"`)
	b := f.call("POST", "/payments", "bob", `{}`, `"k"`)
	c := f.call("POST", "/refunds", "alice", `{}`, `"k"`)
	for name, w := range map[string]*httptest.ResponseRecorder{"alice": a, "bob": b, "refund": c} {
		if w.Code != http.StatusCreated || w.Header().Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("%s: %d %v, want its own run", name, w.Code, w.Header())
		}
	}
	if f.h.runs.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3 (one per principal and route)", f.h.runs.Load())
	}
	// Two resources under one pattern share the route, and the request URI
	// is in the fingerprint: reusing a key across them is refused.
	p1 := f.call("PATCH", "/payments/1", "alice", `{}`, `"p"`)
	p2 := f.call("PATCH", "/payments/2", "alice", `{}`, `"p"`)
	if p1.Code != http.StatusCreated || p2.Code != http.StatusUnprocessableEntity {
		t.Fatalf("PATCH with one key on two resources: %d, %d; want 201 then 422 (the URI is in the fingerprint)", p1.Code, p2.Code)
	}
}

func TestMiddlewareMismatch(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.call("POST", "/payments", "alice", `{"amount":10}`, `"k"`)
	w := f.call("POST", "/payments", "alice", `{"amount":99}`, `"k"`)
	if w.Code != http.StatusUnprocessableEntity || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("other payload: %d %v, want 422 problem", w.Code, w.Header())
	}
	if f.h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", f.h.runs.Load())
	}
}

func TestMiddlewareKeySyntax(t *testing.T) {
	f := newFixture(t, nil, nil)
	bad := map[string][]string{
		"missing":           nil,
		"bare with a space": {`ab c`},
		"bare with comma":   {`a,b`},
		"bare too long":     {strings.Repeat("k", 256)},
		"two lines":         {`"a"`, `"b"`},
		"a list":            {`"a", "b"`},
		"parameters":        {`"a";x=1`},
		"empty string":      {`""`},
		"256 bytes":         {`"` + strings.Repeat("k", 256) + `"`},
		"bad escape":        {`"a\b"`},
		"unterminated":      {`"abc`},
		"control byte":      {"\"a\tb\""},
		"non-ASCII":         {`"clé"`},
	}
	for name, keys := range bad {
		w := f.call("POST", "/payments", "alice", `{}`, keys...)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, w.Code)
		}
	}
	if f.h.runs.Load() != 0 {
		t.Fatalf("handler ran %d times on bad keys", f.h.runs.Load())
	}
	for _, k := range []string{`"` + strings.Repeat("k", 255) + `"`, `"a\"b\\c"`, ` "spaced" `} {
		if w := f.call("POST", "/payments", "alice", `{}`, k); w.Code != http.StatusCreated {
			t.Errorf("key %.20s…: %d, want 201", k, w.Code)
		}
	}
	if key, err := idempotency.ParseKey([]string{`"a\"b\\c"`}); err != nil || key != `a"b\c` {
		t.Fatalf("ParseKey = %q, %v", key, err)
	}
	// Methods outside the list pass through without a key; Optional lets
	// keyless requests of the listed methods through.
	if w := f.call("PUT", "/payments/1", "alice", `{}`); w.Code != http.StatusCreated {
		t.Fatalf("PUT without key: %d", w.Code)
	}
	if w := f.call("GET", "/payments", "alice", ``); w.Code != http.StatusCreated {
		t.Fatalf("GET without key: %d", w.Code)
	}
	opt := newFixture(t, nil, &idempotency.HTTPOptions{Optional: true})
	if w := opt.call("POST", "/payments", "alice", `{}`); w.Code != http.StatusCreated || opt.h.runs.Load() != 1 {
		t.Fatalf("Optional, no key: %d", w.Code)
	}
}

func TestMiddlewareBodyLimit(t *testing.T) {
	f := newFixture(t, nil, &idempotency.HTTPOptions{MaxBodyBytes: 16})
	if w := f.call("POST", "/payments", "alice", strings.Repeat("x", 17), `"k"`); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared length over the limit: %d, want 413", w.Code)
	}
	r := httptest.NewRequest("POST", "/payments", io.MultiReader(strings.NewReader(strings.Repeat("y", 40))))
	r.ContentLength = -1 // chunked: no declared length
	r.Header.Set(idempotency.HeaderKey, `"k2"`)
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit: %d, want 413", w.Code)
	}
	if w := f.call("POST", "/payments", "alice", strings.Repeat("x", 16), `"k3"`); w.Code != http.StatusCreated {
		t.Fatalf("body at the limit: %d", w.Code)
	}
	if f.h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", f.h.runs.Load())
	}
}

// gate is a handler that blocks until released.
type gate struct {
	started chan struct{}
	release chan struct{}
	runs    atomic.Int32
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.runs.Add(1)
	close(g.started)
	<-g.release
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte("accepted"))
}

// inProgressSeen closes seen the first time a Begin answers InProgress.
type inProgressSeen struct {
	idempotency.Store
	once sync.Once
	seen chan struct{}
}

func (s *inProgressSeen) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	r, err := s.Store.Begin(ctx, b)
	if err == nil && r.State == driver.InProgress {
		s.once.Do(func() { close(s.seen) })
	}
	return r, err
}

func TestMiddlewareInFlight(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run("wait="+strconv.FormatBool(wait), func(t *testing.T) {
			s := newMem(t, nil)
			busy := &inProgressSeen{Store: s.Idempotency(), seen: make(chan struct{})}
			k := newKeeper(t, busy, &idempotency.Options{ClaimTTL: 10 * time.Second, Wait: wait})
			g := &gate{started: make(chan struct{}), release: make(chan struct{})}
			h := middleware(t, k, nil)(g)
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/jobs", strings.NewReader("{}"))
				r.Header.Set(idempotency.HeaderKey, `"job-1"`)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first := make(chan *httptest.ResponseRecorder, 1)
			go func() { first <- send() }()
			<-g.started
			if !wait {
				w := send()
				ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
				if w.Code != http.StatusConflict || err != nil || ra < 1 || ra > 10 {
					t.Fatalf("duplicate in flight: %d, Retry-After %q; want 409 with 1..10", w.Code, w.Header().Get("Retry-After"))
				}
				close(g.release)
			} else {
				dup := make(chan *httptest.ResponseRecorder, 1)
				go func() { dup <- send() }()
				// The duplicate found the first request in progress: it
				// is waiting now, and only its wait can turn that answer
				// into the replay asserted below.
				<-busy.seen
				close(g.release)
				w := <-dup
				if w.Code != http.StatusAccepted || w.Body.String() != "accepted" || w.Header().Get(idempotency.HeaderReplayed) != "true" {
					t.Fatalf("waiting duplicate: %d %q %v", w.Code, w.Body.String(), w.Header())
				}
			}
			if w := <-first; w.Code != http.StatusAccepted {
				t.Fatalf("first: %d", w.Code)
			}
			if g.runs.Load() != 1 {
				t.Fatalf("handler ran %d times", g.runs.Load())
			}
		})
	}
}

func TestMiddleware5xxAndPanicRelease(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.h.status = http.StatusServiceUnavailable
	if w := f.call("POST", "/payments", "alice", `{}`, `"k"`); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d", w.Code)
	}
	f.h.status = 0
	if w := f.call("POST", "/payments", "alice", `{}`, `"k"`); w.Code != http.StatusCreated || w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("retry after a 503: %d %v, want a new run", w.Code, w.Header())
	}
	// 4xx is an answer, recorded and replayed.
	f.h.status = http.StatusPaymentRequired
	f.call("POST", "/payments", "alice", `{}`, `"k4"`)
	f.h.status = 0
	if w := f.call("POST", "/payments", "alice", `{}`, `"k4"`); w.Code != http.StatusPaymentRequired || w.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("replay of a 402: %d", w.Code)
	}
	if f.h.runs.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", f.h.runs.Load())
	}

	s := newMem(t, nil)
	k := newKeeper(t, s.Idempotency(), nil)
	var runs atomic.Int32
	h := middleware(t, k, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic(http.ErrAbortHandler)
		}
		w.Write([]byte("ok"))
	}))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/x", nil)
		r.Header.Set(idempotency.HeaderKey, `"p"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		send()
	}()
	if w := send(); w.Code != http.StatusOK || w.Body.String() != "ok" || runs.Load() != 2 {
		t.Fatalf("retry after a panic: %d %q, runs %d", w.Code, w.Body.String(), runs.Load())
	}
}

func TestMiddlewareStoreDown(t *testing.T) {
	s := newMem(t, nil)
	wrapped, faults := idempotencytest.Wrap(s.Idempotency())
	k := newKeeper(t, wrapped, nil)
	var runs atomic.Int32
	h := middleware(t, k, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
	faults.Cut()
	r := httptest.NewRequest("POST", "/x", nil)
	r.Header.Set(idempotency.HeaderKey, `"k"`)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || runs.Load() != 0 {
		t.Fatalf("store down: %d, runs %d; want 503 and no run", w.Code, runs.Load())
	}
}

func TestMiddlewareUnknownOutcome(t *testing.T) {
	s := newMem(t, nil)
	wrapped, faults := idempotencytest.Wrap(s.Idempotency())
	stalled := newKeeper(t, wrapped, &idempotency.Options{ClaimTTL: 50 * time.Millisecond})
	started, resume := make(chan *idempotency.Claim), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		r := httptest.NewRequest("POST", "/x", nil)
		r.Header.Set(idempotency.HeaderKey, `"k"`)
		middleware(t, stalled, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := idempotency.ClaimFromContext(r.Context())
			started <- c
			<-resume
		})).ServeHTTP(httptest.NewRecorder(), r)
	})
	c := <-started
	faults.Cut()
	<-c.Done()
	for {
		rec, _ := s.Idempotency().Inspect(context.Background(), c.ID())
		if rec.ClaimTTL == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	k := newKeeper(t, s.Idempotency(), nil)
	var runs atomic.Int32
	r := httptest.NewRequest("POST", "/x", nil)
	r.Header.Set(idempotency.HeaderKey, `"k"`)
	w := httptest.NewRecorder()
	middleware(t, k, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })).ServeHTTP(w, r)
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "" || runs.Load() != 0 ||
		!strings.Contains(w.Body.String(), "unknown") {
		t.Fatalf("abandoned claim: %d %v %q, runs %d; want 409 saying unknown", w.Code, w.Header(), w.Body.String(), runs.Load())
	}
	faults.Heal()
	close(resume)
	wg.Wait()
}

// TestMiddlewareOverTheWire sends requests through a real server and
// compares the raw bytes of the replayed body.
func TestMiddlewareOverTheWire(t *testing.T) {
	f := newFixture(t, nil, nil)
	srv := httptest.NewServer(f.srv)
	defer srv.Close()
	send := func() (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(`{"a":1}`))
		req.Header.Set(idempotency.HeaderKey, `"wire"`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	r1, b1 := send()
	r2, b2 := send()
	if r1.StatusCode != 201 || r2.StatusCode != 201 || !bytes.Equal(b1, b2) || r2.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("over the wire: %d %q / %d %q %v", r1.StatusCode, b1, r2.StatusCode, b2, r2.Header)
	}
}
