package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// TestMiddlewareInvalidKeysStillLimited: keys built from request input
// that are not valid as-is (a path with a byte that is not UTF-8, with
// NUL, longer than MaxKeyLen; a long user id) are normalized, so under
// FailOpen the request is still limited and no store error is counted.
func TestMiddlewareInvalidKeysStillLimited(t *testing.T) {
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	cases := []struct {
		name, target, user string
		key                ratelimit.KeyFunc
	}{
		{"path with 0xff", "/login%ff", "", ratelimit.Route()},
		{"path with NUL", "/login%00", "", ratelimit.Route()},
		{"over-long path", "/" + strings.Repeat("a", ratelimit.MaxKeyLen+10), "", ratelimit.Route()},
		{"long user id", "/login", strings.Repeat("u", ratelimit.MaxKeyLen), ratelimit.User(user)},
		{"joined with a bad path", "/login%ff", "", ratelimit.Join(ratelimit.Const("k"), ratelimit.Route())},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ms := fakeStore(t)
			l, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "login", Rate: 1, Period: time.Hour}, nil)
			m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{
				Rules:     []ratelimit.Rule{{Limiter: l, Key: c.key}},
				OnFailure: ratelimit.FailOpen,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(ok)
			var codes []int
			for range 3 {
				r := httptest.NewRequest("GET", c.target, nil)
				if c.user != "" {
					r.Header.Set("X-User", c.user)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				codes = append(codes, w.Code)
			}
			if fmt.Sprint(codes) != "[200 429 429]" {
				t.Fatalf("codes %v, want [200 429 429]", codes)
			}
			if st := m.Stats(); st.StoreErrors != 0 || st.FailedOpen != 0 || st.Allowed != 1 || st.Limited != 2 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// invalidStore refuses every decision with ErrInvalid.
type invalidStore struct{ ratelimit.Store }

func (invalidStore) Decide(context.Context, []driver.Request, bool) ([]ratelimit.Decision, error) {
	return nil, fmt.Errorf("%w: refused", ratelimit.ErrInvalid)
}

// TestMiddlewareInvalidIsNotAnOutage: a decision refused with ErrInvalid
// is answered with 500 under every failure policy, never let through by
// FailOpen nor judged by FailLocal, and is not counted as a store error.
func TestMiddlewareInvalidIsNotAnOutage(t *testing.T) {
	_, ms := fakeStore(t)
	s := invalidStore{ms.Limits()}
	l, _ := ratelimit.New(s, ratelimit.GCRA, ratelimit.Limit{Name: "x", Rate: 1, Period: time.Hour}, nil)
	for _, p := range []ratelimit.FailurePolicy{ratelimit.FailClosed, ratelimit.FailOpen, ratelimit.FailLocal} {
		m, err := ratelimit.NewMiddleware(ratelimit.MiddlewareOptions{
			Rules: []ratelimit.Rule{{Limiter: l, Key: ratelimit.Const("k")}}, OnFailure: p, LocalShare: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		reached := false
		w := httptest.NewRecorder()
		m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 500 || reached {
			t.Fatalf("policy %d: %d, handler reached %v", p, w.Code, reached)
		}
		if st := m.Stats(); st.StoreErrors != 0 || st.FailedOpen != 0 || st.LocalUsed != 0 || st.Invalid != 1 {
			t.Fatalf("policy %d: stats %+v", p, st)
		}
	}
}

// TestNormalizeKey: valid keys are kept, others hashed under a prefix that
// kept keys cannot start with.
func TestNormalizeKey(t *testing.T) {
	for _, k := range []string{"ip:203.0.113.7", "u:alice", "r:GET /x", strings.Repeat("a", ratelimit.MaxKeyLen)} {
		if got := ratelimit.NormalizeKey(k); got != k {
			t.Errorf("NormalizeKey(%q) = %q, want it kept", k, got)
		}
	}
	seen := map[string]string{}
	for _, k := range []string{"", "\xff", "a\x00", strings.Repeat("a", ratelimit.MaxKeyLen+1), ratelimit.HashedKeyPrefix, ratelimit.HashedKeyPrefix + "x"} {
		got := ratelimit.NormalizeKey(k)
		if !strings.HasPrefix(got, ratelimit.HashedKeyPrefix) || driver.ValidateKey(got) != nil || got != ratelimit.NormalizeKey(k) {
			t.Errorf("NormalizeKey(%q) = %q", k, got)
		}
		if o, dup := seen[got]; dup {
			t.Errorf("NormalizeKey(%q) = NormalizeKey(%q)", k, o)
		}
		seen[got] = k
	}
	// A kept key equal to a replaced one's result is hashed too.
	h := ratelimit.NormalizeKey("\xff")
	if ratelimit.NormalizeKey(h) == h {
		t.Error("a key that looks hashed was kept")
	}
}
