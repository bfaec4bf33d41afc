package idempotencytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// SQLTarget is a SQL store under test for Keeper.TxMiddleware: its
// database, its record's binder and the caller's business table.
type SQLTarget struct {
	// DB is the database the middleware begins its transactions on.
	DB *sql.DB
	// Bind binds the store's record on DB's tables to a transaction
	// (txn.Idempotency(store)).
	Bind idempotency.TxBinder
	// Direct is the store's idempotency view on the same data.
	Direct idempotency.Store
	// Add inserts one business row named name in tx.
	Add func(ctx context.Context, tx *sql.Tx, name string) error
	// Count returns the number of committed business rows named name.
	Count func(ctx context.Context, name string) (int, error)
	// Unit is a short claim TTL the store honours. Default 300ms.
	Unit time.Duration
}

// RunTxMiddleware runs the cases of Keeper.TxMiddleware: the record and the
// handler's rows commit together or not at all, with the plain
// middleware's replay, 409, 413 and 422. newTarget is called once per
// subtest.
func RunTxMiddleware(t *testing.T, newTarget func(t *testing.T) SQLTarget) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tg SQLTarget)
	}{
		{"CommitsRowsWithRecordAndReplays", testTxHTTPCommit},
		{"FailureLeavesNeitherRowsNorRecord", testTxHTTPFailure},
		{"PanicLeavesNeitherRowsNorRecord", testTxHTTPPanic},
		{"MismatchAndBodyTooLarge", testTxHTTPRefusals},
		{"InProgressAndUnknown409", testTxHTTP409},
		{"ConcurrentDuplicatesRunOnce", testTxHTTPConcurrent},
		{"OptionalWithoutKeyCommitsByStatus", testTxHTTPOptional},
		{"HandlerEndingTheTransactionIs500", testTxHTTPHandlerCommits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.DB == nil || tg.Bind == nil || tg.Direct == nil || tg.Add == nil || tg.Count == nil {
				t.Fatal("idempotencytest: SQLTarget needs DB, Bind, Direct, Add and Count")
			}
			if tg.Unit <= 0 {
				tg.Unit = 300 * time.Millisecond
			}
			tc.fn(t, tg)
		})
	}
}

// txHTTP is one route behind TxMiddleware whose handler adds a business
// row and answers what answer returns.
type txHTTP struct {
	tg     SQLTarget
	route  string // unique to the test
	scope  string // the records' scope
	runs   atomic.Int32
	answer func(w http.ResponseWriter, r *http.Request, run int32)
	h      http.Handler
}

const txPrincipal = "alice"

func newTxHTTP(t *testing.T, tg SQLTarget, ko *idempotency.Options, ho *idempotency.HTTPOptions) *txHTTP {
	t.Helper()
	x := &txHTTP{tg: tg, route: fmt.Sprintf("POST /orders/%s/%d", t.Name(), time.Now().UnixNano())}
	x.scope = fmt.Sprintf("%d:%s %s", len(txPrincipal), txPrincipal, x.route)
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) {
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", run))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, run)
	}
	var o idempotency.HTTPOptions
	if ho != nil {
		o = *ho
	}
	o.Principal = func(*http.Request) string { return txPrincipal }
	o.Route = func(*http.Request) string { return x.route }
	mw, err := newKeeper(t, tg.Direct, ko).TxMiddleware(tg.DB, tg.Bind, &o)
	if err != nil {
		t.Fatalf("TxMiddleware: %v", err)
	}
	x.h = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run := x.runs.Add(1)
		tx, ok := idempotency.TxFromContext(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusTeapot)
			return
		}
		if err := tg.Add(r.Context(), tx, x.row(r)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		x.answer(w, r, run)
	}))
	return x
}

// row is the business row a request adds: the route and the key.
func (x *txHTTP) row(r *http.Request) string {
	return x.route + " " + r.Header.Get(idempotency.HeaderKey)
}

func (x *txHTTP) do(key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	if key != "" {
		r.Header.Set(idempotency.HeaderKey, key)
	}
	w := httptest.NewRecorder()
	x.h.ServeHTTP(w, r)
	return w
}

func (x *txHTTP) rows(t *testing.T, key string) int {
	t.Helper()
	n, err := x.tg.Count(ctxT(t), x.route+" "+key)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

func (x *txHTTP) record(t *testing.T, key string) idempotency.Record {
	t.Helper()
	return inspect(t, x.tg.Direct, idempotency.ID{Scope: x.scope, Key: key})
}

func wantResponse(t *testing.T, w *httptest.ResponseRecorder, status int, body string, replayed bool) {
	t.Helper()
	if w.Code != status || (body != "" && w.Body.String() != body) || (w.Header().Get(idempotency.HeaderReplayed) == "true") != replayed {
		t.Fatalf("response %d %q (replayed %q), want %d %q replayed=%v", w.Code, w.Body.String(),
			w.Header().Get(idempotency.HeaderReplayed), status, body, replayed)
	}
}

func testTxHTTPCommit(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, nil)
	w := x.do("k1", `{"item":1}`)
	wantResponse(t, w, http.StatusCreated, `{"order":1}`, false)
	if w.Header().Get("Location") != "/orders/1" {
		t.Fatalf("Location %q", w.Header().Get("Location"))
	}
	if n := x.rows(t, "k1"); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	if r := x.record(t, "k1"); r.State() != idempotency.StateDone {
		t.Fatalf("record %+v, want completed", r)
	}
	for range 2 {
		w := x.do("k1", `{"item":1}`)
		wantResponse(t, w, http.StatusCreated, `{"order":1}`, true)
		if w.Header().Get("Location") != "/orders/1" || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("replayed headers %v", w.Header())
		}
	}
	if n := x.rows(t, "k1"); n != 1 || x.runs.Load() != 1 {
		t.Fatalf("after replays: %d rows, %d runs; want 1 and 1", n, x.runs.Load())
	}
	// Another key runs and commits on its own.
	wantResponse(t, x.do("k2", `{"item":1}`), http.StatusCreated, `{"order":2}`, false)
	if n := x.rows(t, "k2"); n != 1 {
		t.Fatalf("%d rows of k2, want 1", n)
	}
}

func testTxHTTPFailure(t *testing.T, tg SQLTarget) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusConflict} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			x := newTxHTTP(t, tg, &idempotency.Options{Errors: idempotency.StoreErrors}, nil)
			ok := x.answer
			x.answer = func(w http.ResponseWriter, r *http.Request, run int32) {
				if run == 1 {
					http.Error(w, "try again", status)
					return
				}
				ok(w, r, run)
			}
			wantResponse(t, x.do("k", "{}"), status, "try again\n", false)
			if n := x.rows(t, "k"); n != 0 {
				t.Fatalf("%d business rows after %d, want 0", n, status)
			}
			if r := x.record(t, "k"); r.Exists {
				t.Fatalf("record %+v after %d, want none", r, status)
			}
			wantResponse(t, x.do("k", "{}"), http.StatusCreated, `{"order":2}`, false)
			if n := x.rows(t, "k"); n != 1 || x.runs.Load() != 2 {
				t.Fatalf("retry: %d rows, %d runs; want 1 and 2", n, x.runs.Load())
			}
			wantResponse(t, x.do("k", "{}"), http.StatusCreated, `{"order":2}`, true)
		})
	}
	// HTTPOptions.Record decides, as for the plain middleware: a 404 it
	// refuses rolls back; by default a 404 is recorded with its rows.
	x := newTxHTTP(t, tg, nil, &idempotency.HTTPOptions{Record: func(s int) bool { return s != http.StatusNotFound }})
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) { http.NotFound(w, r) }
	wantResponse(t, x.do("k", "{}"), http.StatusNotFound, "", false)
	if n := x.rows(t, "k"); n != 0 || x.record(t, "k").Exists {
		t.Fatalf("a response Record refuses left %d rows or a record", n)
	}
	y := newTxHTTP(t, tg, nil, nil)
	y.answer = func(w http.ResponseWriter, r *http.Request, run int32) { http.NotFound(w, r) }
	wantResponse(t, y.do("k", "{}"), http.StatusNotFound, "", false)
	wantResponse(t, y.do("k", "{}"), http.StatusNotFound, "", true)
	if n := y.rows(t, "k"); n != 1 || y.runs.Load() != 1 {
		t.Fatalf("recorded 404: %d rows, %d runs; want 1 and 1", n, y.runs.Load())
	}
}

func testTxHTTPPanic(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, nil)
	ok := x.answer
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) {
		if run == 1 {
			w.WriteHeader(http.StatusCreated)
			panic("handler failed")
		}
		ok(w, r, run)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		x.do("k", "{}")
	}()
	if n := x.rows(t, "k"); n != 0 || x.record(t, "k").Exists {
		t.Fatalf("after a panic: %d rows, record %+v; want neither", n, x.record(t, "k"))
	}
	wantResponse(t, x.do("k", "{}"), http.StatusCreated, `{"order":2}`, false)
	if n := x.rows(t, "k"); n != 1 {
		t.Fatalf("retry after a panic: %d rows, want 1", n)
	}
}

func testTxHTTPRefusals(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, &idempotency.HTTPOptions{MaxBodyBytes: 16})
	wantResponse(t, x.do("k", `{"a":1}`), http.StatusCreated, `{"order":1}`, false)
	if w := x.do("k", `{"a":2}`); w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("other payload: %d, want 422", w.Code)
	}
	if w := x.do("big", strings.Repeat("x", 17)); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("large body: %d, want 413", w.Code)
	}
	if w := x.do("", "{}"); w.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", w.Code)
	}
	if n := x.rows(t, "k"); n != 1 || x.runs.Load() != 1 || x.rows(t, "big") != 0 || x.record(t, "big").Exists {
		t.Fatalf("after refusals: %d rows of k, %d runs; want 1 and 1, and nothing of big", n, x.runs.Load())
	}
}

func testTxHTTP409(t *testing.T, tg SQLTarget) {
	fp := "fixed-fingerprint"
	x := newTxHTTP(t, tg, nil, &idempotency.HTTPOptions{Fingerprint: func(*http.Request, []byte) string { return fp }})
	// In progress: Do outside a transaction holds the claim.
	req := idempotency.Request{Scope: x.scope, Key: "held", Fingerprint: fp}
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := newKeeper(t, tg.Direct, nil).Do(ctxT(t), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
			close(holding)
			<-release
			return nil, errors.New("released")
		})
		done <- err
	}()
	<-holding
	w := x.do("held", "{}")
	close(release)
	<-done
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
		t.Fatalf("while in progress: %d, Retry-After %q; want 409 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	// Unknown: a claim that expired without a result.
	tok := idempotency.NewToken()
	if b, err := tg.Direct.Begin(ctxT(t), driver.Begin{ID: idempotency.ID{Scope: x.scope, Key: "lost"}, Fingerprint: fp,
		Token: tok, ClaimTTL: tg.Unit, Retention: time.Hour}); err != nil || b.State != driver.Claimed {
		t.Fatalf("Begin: %+v %v", b, err)
	}
	waitFor(t, 30*time.Second, "the claim's expiry", func() bool { return x.record(t, "lost").State() == idempotency.StateUnknown })
	w = x.do("lost", "{}")
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "" {
		t.Fatalf("unknown outcome: %d, Retry-After %q; want 409 without it", w.Code, w.Header().Get("Retry-After"))
	}
	if x.runs.Load() != 0 || x.rows(t, "held") != 0 || x.rows(t, "lost") != 0 {
		t.Fatalf("the handler ran %d times on refused requests", x.runs.Load())
	}
}

func testTxHTTPConcurrent(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, nil)
	ok := x.answer
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) {
		time.Sleep(20 * time.Millisecond) // let the duplicates arrive
		ok(w, r, run)
	}
	const n = 6
	var wg sync.WaitGroup
	res := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Go(func() { res[i] = x.do("k", "{}") })
	}
	wg.Wait()
	replays := 0
	for _, w := range res {
		if w.Code != http.StatusCreated || w.Body.String() != `{"order":1}` {
			t.Fatalf("duplicate got %d %q, want 201 with the first response", w.Code, w.Body.String())
		}
		if w.Header().Get(idempotency.HeaderReplayed) == "true" {
			replays++
		}
	}
	if replays != n-1 || x.runs.Load() != 1 || x.rows(t, "k") != 1 {
		t.Fatalf("%d replays, %d runs, %d rows; want %d, 1, 1", replays, x.runs.Load(), x.rows(t, "k"), n-1)
	}
}

func testTxHTTPOptional(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, &idempotency.HTTPOptions{Optional: true})
	wantResponse(t, x.do("", "{}"), http.StatusCreated, `{"order":1}`, false)
	if n := x.rows(t, ""); n != 1 {
		t.Fatalf("unprotected request: %d rows, want 1 (committed)", n)
	}
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) { http.Error(w, "down", http.StatusBadGateway) }
	wantResponse(t, x.do("", "{}"), http.StatusBadGateway, "down\n", false)
	if n := x.rows(t, ""); n != 1 {
		t.Fatalf("unprotected 502: %d rows, want still 1 (rolled back)", n)
	}
}

func testTxHTTPHandlerCommits(t *testing.T, tg SQLTarget) {
	x := newTxHTTP(t, tg, nil, nil)
	x.answer = func(w http.ResponseWriter, r *http.Request, run int32) {
		tx, _ := idempotency.TxFromContext(r.Context())
		_ = tx.Rollback()
		w.WriteHeader(http.StatusCreated)
	}
	if w := x.do("k", "{}"); w.Code != http.StatusInternalServerError {
		t.Fatalf("a handler that ended the transaction: %d, want 500", w.Code)
	}
	if n := x.rows(t, "k"); n != 0 || x.record(t, "k").Exists {
		t.Fatalf("after the handler rolled back: %d rows, record %+v", n, x.record(t, "k"))
	}
}
