package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// refusing is a Store whose renewals can be made to fail with
// ErrClaimLost, so that a keep-alive left running ends.
type refusing struct {
	counting
	refuse atomic.Bool
}

func (r *refusing) Renew(ctx context.Context, id idempotency.ID, tok string, f uint64, ttl time.Duration) error {
	if r.refuse.Load() {
		return idempotency.ErrClaimLost
	}
	return r.counting.Renew(ctx, id, tok, f, ttl)
}

// TestPanicStopsKeepAliveAndReleases: however fn ends without returning
// (a panic that the caller recovers, as net/http does for handlers, or
// runtime.Goexit), Do stops renewing the claim and releases it: the store
// shows no live claim, renewals stop, and a retry runs at once.
func TestPanicStopsKeepAliveAndReleases(t *testing.T) {
	ends := map[string]func(){
		"panic":      func() { panic("boom") },
		"abort":      func() { panic(http.ErrAbortHandler) },
		"Goexit":     runtime.Goexit,
		"panic(nil)": func() { panic(nil) },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				direct := newMem(t, nil).Idempotency()
				s := &refusing{counting: counting{Store: direct}}
				defer s.refuse.Store(true) // ends a keep-alive left behind
				k := newKeeper(t, s, &idempotency.Options{ClaimTTL: 30 * time.Second})
				done := make(chan any)
				go func() {
					defer func() { done <- recover() }()
					k.Do(t.Context(), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
						time.Sleep(25 * time.Second) // renewed meanwhile
						end()
						return []byte("unreachable"), nil
					})
				}()
				p := <-done
				if name != "Goexit" && p == nil {
					t.Fatalf("the panic did not reach the caller")
				}
				renews := s.renews.Load()
				if renews == 0 {
					t.Fatal("the claim was not renewed while fn ran")
				}
				rec, err := direct.Inspect(t.Context(), req.ID())
				if err != nil || rec.Exists {
					t.Fatalf("record after fn ended abruptly: %+v %v; want no live claim", rec, err)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if n := s.renews.Load(); n != renews {
					t.Fatalf("%d renewals after fn ended, want none", n-renews)
				}
				if rec, err := direct.Inspect(t.Context(), req.ID()); err != nil || rec.Exists {
					t.Fatalf("record a minute later: %+v %v", rec, err)
				}
				res, err := k.Do(t.Context(), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
					return []byte("again"), nil
				})
				if err != nil || res.Replayed || string(res.Value) != "again" {
					t.Fatalf("retry: %+v %v; want a new run", res, err)
				}
			})
		})
	}
}

// TestMiddlewarePanicStopsKeepAlive: a handler that panics (net/http
// recovers it) leaves no live claim, and the retry runs at once.
func TestMiddlewarePanicStopsKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		direct := newMem(t, nil).Idempotency()
		s := &refusing{counting: counting{Store: direct}}
		defer s.refuse.Store(true)
		k := newKeeper(t, s, &idempotency.Options{ClaimTTL: 3 * time.Second})
		var runs atomic.Int32
		h := middleware(t, k, &idempotency.HTTPOptions{Principal: func(*http.Request) string { return "u" }})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				time.Sleep(2 * time.Second)
				panic("handler bug")
			}
			w.Write([]byte("ok"))
		}))
		send := func() (w *httptest.ResponseRecorder, p any) {
			defer func() { p = recover() }()
			r := httptest.NewRequest("POST", "/x", nil)
			r.Header.Set(idempotency.HeaderKey, `"p"`)
			w = httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w, nil
		}
		if _, p := send(); p == nil {
			t.Fatal("the handler's panic did not reach the server")
		}
		renews := s.renews.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.renews.Load(); n != renews {
			t.Fatalf("%d renewals after the panic, want none", n-renews)
		}
		if w, _ := send(); w.Code != http.StatusOK || runs.Load() != 2 {
			t.Fatalf("retry: %d, runs %d", w.Code, runs.Load())
		}
		if s.releases.Load() != 1 {
			t.Fatalf("%d releases, want 1", s.releases.Load())
		}
	})
}
