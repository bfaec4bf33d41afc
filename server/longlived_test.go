package server_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
)

// countedLeases counts the store calls of a lease store.
type countedLeases struct {
	lease.Store
	inspects, acquires atomic.Int64
}

func (c *countedLeases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	c.inspects.Add(1)
	return c.Store.Inspect(ctx, key)
}

func (c *countedLeases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	c.acquires.Add(1)
	return c.Store.Acquire(ctx, key, token, ttl)
}

// newCountedDash is newDash over a lease store whose calls are counted,
// with cfg.
func newCountedDash(t *testing.T, cfg *server.Config) (*dashEnv, *countedLeases, *server.Server) {
	t.Helper()
	m, st := memStores(t)
	cl := &countedLeases{Store: st.Leases}
	st.Leases = cl
	logs := &syncBuf{}
	srv, err := server.New(st, &server.Options{Config: cfg, UIRefresh: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	jar, _ := cookiejar.New(nil)
	return &dashEnv{mem: m, url: hs.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}, logs: logs}, cl, srv
}

// TestStreamsCappedPerToken: a token holds at most max_streams event
// streams at once; one more is refused until one closes.
func TestStreamsCappedPerToken(t *testing.T) {
	cfg := testConfig()
	cfg.MaxStreams = 2
	e, _, _ := newCountedDash(t, cfg)
	if resp := e.login(t, adminTok); resp.StatusCode != 200 {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	q := url.Values{"key": {"a"}}
	_, close1 := e.stream(t, q)
	_, close2 := e.stream(t, q)
	defer close2()
	resp, body := e.req(t, "GET", "/ui/api/events?"+q.Encode(), nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third stream: %d %s, want 429", resp.StatusCode, body)
	}
	close1()
	// The closed stream's place comes back once the server has seen it go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithCancel(t.Context())
		r, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/ui/api/events?"+q.Encode(), nil)
		resp, err := e.c.Do(r)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		st := resp.StatusCode
		resp.Body.Close()
		cancel()
		if st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after one closed: %d", st)
		}
	}
}

// TestStreamsShareAndPay: streams of one token watching the same panel
// share its store reads, and every later snapshot is charged to the
// token's rate limit: over it, the stream sends "limited" and reads
// nothing.
func TestStreamsShareAndPay(t *testing.T) {
	cfg := testConfig()
	cfg.Rate, cfg.Period, cfg.Burst = 6, time.Hour, 6
	e, cl, _ := newCountedDash(t, cfg)
	e.login(t, adminTok)
	q := url.Values{"key": {"a"}, "list": {"0"}, "idemlist": {"0"}}
	r1, c1 := e.stream(t, q)
	defer c1()
	r2, c2 := e.stream(t, q)
	defer c2()
	counts := map[string]int{}
	for range 12 {
		for _, r := range []*bufio.Reader{r1, r2} {
			name, _ := event(t, r)
			counts[name]++
		}
	}
	// Two streams opened (2 of the 6), then at most 4 more reads of the
	// watched key were paid for, shared or not.
	if n := cl.inspects.Load(); n > 6 {
		t.Errorf("%d store reads for a token limited to 6 requests", n)
	}
	if counts["limited"] == 0 || counts["snapshot"] < 2 {
		t.Errorf("events %v: want snapshots, then limited ones", counts)
	}
	if n := cl.inspects.Load(); int(n) >= counts["snapshot"] {
		t.Errorf("%d store reads for %d snapshots: the two streams shared none", n, counts["snapshot"])
	}
}

// TestWaitsCappedAndCharged: a token has at most max_waits acquires
// waiting at once, and each attempt of a wait after the first is charged
// to its rate limit.
func TestWaitsCappedAndCharged(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWaits = 1
	e, _, srv := newCountedDash(t, cfg)
	api := &env{url: e.url}
	if st, b, _ := api.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute)}); st != 200 {
		t.Fatalf("hold the key: %d %s", st, b)
	}
	waiting := make(chan struct{}, 1)
	srv.SetOnWait(func() { waiting <- struct{}{} })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		st, _, _, _ := api.send(ctx, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(20 * time.Second)})
		done <- st
	}()
	<-waiting
	st, b, h := api.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(time.Second)})
	problem(t, st, b, h, http.StatusTooManyRequests, serveapi.TypeRateLimited)
	// Without waiting it is not capped.
	st, b, h = api.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute)})
	problem(t, st, b, h, http.StatusConflict, serveapi.TypeHeld)
	cancel()
	<-done

	cfg = testConfig()
	cfg.Rate, cfg.Period, cfg.Burst = 4, time.Hour, 4
	e, cl, _ := newCountedDash(t, cfg)
	api = &env{url: e.url}
	api.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute)})
	before := cl.acquires.Load()
	st, b, h = api.do(t, adminTok, "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: serveapi.Duration(time.Minute), Wait: serveapi.Duration(20 * time.Second)})
	p := problem(t, st, b, h, http.StatusTooManyRequests, serveapi.TypeRateLimited)
	if n := cl.acquires.Load() - before; n > 3 {
		t.Errorf("a wait made %d store attempts on a token with 2 requests left (%s)", n, p.Detail)
	}
}
