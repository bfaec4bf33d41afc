package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/memstore"
)

// A bare token (as client SDKs send it) and its sf-string form name the
// same key; StrictKey accepts only the sf-string.
func TestBareKeyIsTheQuotedKey(t *testing.T) {
	f := newFixture(t, nil, nil)
	first := f.call("POST", "/payments", "alice", `{"amount":1}`, `8e03978e-40d5-43e8-bc93-6894a57f9324`)
	if first.Code != http.StatusCreated {
		t.Fatalf("bare key: %d", first.Code)
	}
	again := f.call("POST", "/payments", "alice", `{"amount":1}`, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	if again.Code != http.StatusCreated || again.Header().Get(idempotency.HeaderReplayed) != "true" || f.h.runs.Load() != 1 {
		t.Fatalf("quoted form of the bare key: %d replayed=%q runs=%d, want the replay", again.Code, again.Header().Get(idempotency.HeaderReplayed), f.h.runs.Load())
	}
	strict := newFixture(t, nil, &idempotency.HTTPOptions{StrictKey: true})
	if w := strict.call("POST", "/payments", "alice", `{}`, `abc`); w.Code != http.StatusBadRequest || strict.h.runs.Load() != 0 {
		t.Fatalf("StrictKey with a bare key: %d, runs %d; want 400 and no run", w.Code, strict.h.runs.Load())
	}
	if w := strict.call("POST", "/payments", "alice", `{}`, `"abc"`); w.Code != http.StatusCreated {
		t.Fatalf("StrictKey with an sf-string: %d", w.Code)
	}
	for _, v := range []string{`abc`, ` abc `, "abc\t"} {
		if key, err := idempotency.ParseKey([]string{v}); err != nil || key != "abc" {
			t.Errorf("ParseKey(%q) = %q, %v; want abc", v, key, err)
		}
		if _, err := idempotency.ParseKeyStrict([]string{v}); err == nil {
			t.Errorf("ParseKeyStrict(%q) accepted a bare key", v)
		}
	}
}

// statusHandler answers the status it is told, counting runs.
type statusHandler struct {
	status atomic.Int64
	runs   atomic.Int64
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	w.WriteHeader(int(h.status.Load()))
	w.Write([]byte("answer"))
}

// Transient answers (408, 409, 425, 429) are not recorded by default: the
// key is released and the retry runs. Record overrides which are.
func TestTransientStatusesNotRecorded(t *testing.T) {
	send := func(srv http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/x", strings.NewReader("{}"))
		r.Header.Set(idempotency.HeaderKey, `"k"`)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	for _, st := range []int{408, 409, 425, 429, 500, 503} {
		s := newMem(t, nil)
		h := &statusHandler{}
		h.status.Store(int64(st))
		srv := middleware(t, newKeeper(t, s.Idempotency(), nil), &idempotency.HTTPOptions{Anonymous: true})(h)
		if w := send(srv); w.Code != st {
			t.Fatalf("%d: first answer %d", st, w.Code)
		}
		h.status.Store(201)
		if w := send(srv); w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" || h.runs.Load() != 2 {
			t.Errorf("%d was recorded: the retry got %d (replayed %q, runs %d), want a fresh 201", st, w.Code, w.Header().Get(idempotency.HeaderReplayed), h.runs.Load())
		}
	}
	for _, st := range []int{200, 201, 400, 404, 422} {
		s := newMem(t, nil)
		h := &statusHandler{}
		h.status.Store(int64(st))
		srv := middleware(t, newKeeper(t, s.Idempotency(), nil), &idempotency.HTTPOptions{Anonymous: true})(h)
		send(srv)
		h.status.Store(201)
		if w := send(srv); w.Code != st || w.Header().Get(idempotency.HeaderReplayed) != "true" || h.runs.Load() != 1 {
			t.Errorf("%d was not recorded: the retry got %d (runs %d)", st, w.Code, h.runs.Load())
		}
	}
	// Record decides: here 429 is recorded and 404 is not.
	s := newMem(t, nil)
	h := &statusHandler{}
	h.status.Store(429)
	srv := middleware(t, newKeeper(t, s.Idempotency(), nil), &idempotency.HTTPOptions{Anonymous: true,
		Record: func(status int) bool { return status != 404 }})(h)
	send(srv)
	h.status.Store(201)
	if w := send(srv); w.Code != 429 || h.runs.Load() != 1 {
		t.Fatalf("Record(429)=true: the retry got %d, runs %d; want the replayed 429", w.Code, h.runs.Load())
	}
}

// The rate limiter can sit outside or inside the idempotency middleware;
// in both orders a request the limiter refused runs once the limit allows
// it, and an admitted request is replayed without being charged again
// only when the limiter is inside.
func TestRateLimiterOrder(t *testing.T) {
	for _, order := range []string{"limiter outside", "limiter inside"} {
		t.Run(order, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			s := newMem(t, &memstore.Options{Clock: func() time.Time { return time.Unix(0, now.Load()) }})
			lim, err := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "orders", Rate: 1, Period: time.Hour}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{Rules: []ratelimit.Rule{{Limiter: lim, Key: ratelimit.Const("all")}}})
			if err != nil {
				t.Fatal(err)
			}
			idem := middleware(t, newKeeper(t, s.Idempotency(), nil), &idempotency.HTTPOptions{Anonymous: true})
			h := &statusHandler{}
			h.status.Store(201)
			var srv http.Handler
			if order == "limiter outside" {
				srv = rl.Handler(idem(h))
			} else {
				srv = idem(rl.Handler(h))
			}
			send := func(key string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
				r.Header.Set(idempotency.HeaderKey, key)
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, r)
				return w
			}
			if w := send("a"); w.Code != 201 {
				t.Fatalf("first request: %d", w.Code)
			}
			w := send("b")
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
				t.Fatalf("second request: %d (Retry-After %q), want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
			}
			// A retry of the admitted request: replayed when the limiter is
			// inside (it never sees the retry); refused by the limiter when
			// it is outside (it charges every request).
			w = send("a")
			switch order {
			case "limiter inside":
				if w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "true" {
					t.Fatalf("retry of a: %d replayed=%q, want the replay", w.Code, w.Header().Get(idempotency.HeaderReplayed))
				}
			default:
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("retry of a: %d, want 429 from the limiter outside", w.Code)
				}
			}
			// An hour later the refused request runs: its 429 was not recorded.
			now.Add(int64(time.Hour + time.Second))
			if w := send("b"); w.Code != 201 || w.Header().Get(idempotency.HeaderReplayed) != "" {
				t.Fatalf("retry of b after the window: %d replayed=%q, want a fresh 201", w.Code, w.Header().Get(idempotency.HeaderReplayed))
			}
			if got := h.runs.Load(); got != 2 {
				t.Fatalf("handler ran %d times, want 2 (a once, b once)", got)
			}
		})
	}
}
