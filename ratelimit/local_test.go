package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// downStore is a store that cannot be reached.
type downStore struct{ Store }

func (downStore) Decide(context.Context, []driver.Request, bool) ([]Decision, error) {
	return nil, fmt.Errorf("%w: down", ErrUnavailable)
}

// fakeClock is a clock moved by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// localMiddleware is a FailLocal middleware keyed by the X-User header in
// front of a store that is down, its local limiter on clock.
func localMiddleware(t *testing.T, clock *fakeClock, maxKeys int) (*Middleware, http.Handler) {
	t.Helper()
	l, err := New(downStore{}, GCRA, Limit{Name: "u", Rate: 1, Period: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMiddleware(MiddlewareOptions{
		Rules:     []Rule{{Limiter: l, Key: User(func(r *http.Request) string { return r.Header.Get("X-User") })}},
		OnFailure: FailLocal, LocalShare: 1, LocalMaxKeys: maxKeys,
	}, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	return m, m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

func serveUser(h http.Handler, user string) int {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestLocalStateReleased: under FailLocal, one new key per request leaves
// expired state behind; it is released as fast as it is created, so the
// local limiter holds about the live keys only.
func TestLocalStateReleased(t *testing.T) {
	clock := &fakeClock{t: time.Date(2041, 1, 2, 3, 4, 5, 0, time.UTC)}
	m, h := localMiddleware(t, clock, 0)
	most := 0
	for i := range 50_000 {
		if c := serveUser(h, strconv.Itoa(i)); c != 200 {
			t.Fatalf("request %d: %d", i, c)
		}
		clock.Advance(time.Millisecond) // a key's state lives 1s: ~1000 live
		most = max(most, m.lstore.Len())
	}
	if most > 1_100 {
		t.Fatalf("%d entries held for about 1,000 live ones", most)
	}
	clock.Advance(time.Hour)
	for range 1_000 {
		serveUser(h, "again")
		clock.Advance(time.Second)
	}
	if n := entries(t, m); n != 1 {
		t.Fatalf("%d entries after everything else expired, want 1", n)
	}
}

// TestLocalFull: when the local limiter holds LocalMaxKeys live entries, a
// request that needs a new one is refused with 429 (never admitted past a
// limit), known keys are limited as usual, and an expired entry makes room.
func TestLocalFull(t *testing.T) {
	clock := &fakeClock{t: time.Date(2041, 1, 2, 3, 4, 5, 0, time.UTC)}
	m, h := localMiddleware(t, clock, 3)
	for _, u := range []string{"a", "b", "c"} {
		if c := serveUser(h, u); c != 200 {
			t.Fatalf("%s: %d", u, c)
		}
		clock.Advance(100 * time.Millisecond)
	}
	if c := serveUser(h, "d"); c != 429 {
		t.Fatalf("a new key when full: %d, want 429", c)
	}
	if c := serveUser(h, "b"); c != 429 {
		t.Fatalf("a known key past its limit: %d, want 429", c)
	}
	clock.Advance(700 * time.Millisecond) // a's state expired
	if c := serveUser(h, "d"); c != 200 {
		t.Fatalf("a new key after an entry expired: %d, want 200", c)
	}
	if n := entries(t, m); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	if st := m.Stats(); st.Allowed != 4 || st.Limited != 2 || st.FailedOpen != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// entries returns how many entries m's local limiter holds, expired ones
// included, after checking that its maps, heaps and count agree.
func entries(t *testing.T, m *Middleware) int {
	t.Helper()
	n, err := m.lstore.Entries()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
