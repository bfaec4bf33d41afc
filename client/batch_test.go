package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
)

// gatedServer is a tenure serve on a memstore whose first API request
// waits for the gate to open, counting the requests by path.
type gatedServer struct {
	url   string
	gate  chan struct{}
	mu    sync.Mutex
	paths map[string]int
}

func (g *gatedServer) count(path string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paths[path]
}

// waitCount waits until the server has seen n requests to path.
func (g *gatedServer) waitCount(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for g.count(path) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d requests to %s (%d)", n, path, g.count(path))
		}
		time.Sleep(time.Millisecond)
	}
}

// newGatedServer starts the server; noBatch makes it answer /v1/batch as a
// server without the batch operation does.
func newGatedServer(t *testing.T, noBatch bool) (*gatedServer, lease.Store) {
	t.Helper()
	m := newMem(t, nil)
	srv, err := server.New(server.Stores{Leases: m.Leases()},
		&server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedServer{gate: make(chan struct{}), paths: map[string]int{}}
	var first atomic.Bool
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.paths[r.URL.Path]++
		g.mu.Unlock()
		if first.CompareAndSwap(false, true) {
			<-g.gate
		}
		if noBatch && r.URL.Path == "/v1/batch" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"type":"urn:tenure:problem:not_found","title":"not found","status":404,"detail":"no such route: POST /v1/batch"}`)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	g.url = hs.URL
	return g, m.Leases()
}

// waitQueued waits until n calls wait in c's batcher.
func waitQueued(t *testing.T, c *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for c.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d queued calls (%d)", n, c.Queued())
		}
		time.Sleep(time.Millisecond)
	}
}

// Calls made while the client's one request is in flight go together in
// one batch request, and each gets its own answer: grants with their
// fences, the refusals of a contended key, a release's not-held.
func TestBatchCarriesQueuedCalls(t *testing.T) {
	g, store := newGatedServer(t, false)
	c, err := client.New(g.url, &client.Options{Token: testToken, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Leases()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := leases.Acquire(ctx, "batch/first", lease.NewToken(), time.Minute)
		first <- err
	}()
	g.waitCount(t, "/v1/leases/acquire", 1)
	// The first call holds the one request in flight; these queue.
	const distinct, same = 20, 6
	toks := make([]string, distinct+same)
	grants := make([]lease.Grant, distinct+same)
	errs := make([]error, distinct+same+1)
	var wg sync.WaitGroup
	for i := range toks {
		toks[i] = lease.NewToken()
		key := fmt.Sprintf("batch/%d", i)
		if i >= distinct {
			key = "batch/same"
		}
		wg.Go(func() { grants[i], errs[i] = leases.Acquire(ctx, key, toks[i], time.Minute) })
	}
	wg.Go(func() { errs[distinct+same] = leases.Release(ctx, "batch/0", lease.NewToken()) })
	waitQueued(t, c, distinct+same+1)
	close(g.gate)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	if n := g.count("/v1/batch"); n != 1 {
		t.Fatalf("%d batch requests, want 1 (requests: %v)", n, g.paths)
	}
	if n := g.count("/v1/leases/acquire"); n != 1 {
		t.Fatalf("%d acquire requests of their own, want 1 (the first)", n)
	}
	for i := range distinct {
		if errs[i] != nil || grants[i].Fence == 0 {
			t.Fatalf("acquire %d: %+v, %v", i, grants[i], errs[i])
		}
		info, err := store.Inspect(ctx, fmt.Sprintf("batch/%d", i))
		if err != nil || !info.Held || info.Fence != grants[i].Fence {
			t.Fatalf("batch/%d in the store: %+v, %v; granted fence %d", i, info, err, grants[i].Fence)
		}
	}
	won := -1
	for i := distinct; i < distinct+same; i++ {
		var held *lease.HeldError
		switch {
		case errs[i] == nil && won < 0:
			won = i
		case errors.As(errs[i], &held) && errors.Is(errs[i], lease.ErrHeld) && held.TTL > 0:
		default:
			t.Fatalf("contended acquire %d: %+v, %v", i, grants[i], errs[i])
		}
	}
	if won < 0 {
		t.Fatal("no acquire of the contended key was granted")
	}
	if info, err := store.Inspect(ctx, "batch/same"); err != nil || !info.Held || info.Fence != grants[won].Fence {
		t.Fatalf("batch/same in the store: %+v, %v; granted fence %d", info, err, grants[won].Fence)
	}
	if err := errs[distinct+same]; !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("release with another token: %v, want ErrNotHeld", err)
	}
}

// A caller that gives up while its call waits in the queue gets an
// unavailable error at once, and its call is never sent.
func TestBatchCallerGivesUp(t *testing.T) {
	g, store := newGatedServer(t, false)
	c, err := client.New(g.url, &client.Options{Token: testToken, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Leases()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := leases.Acquire(ctx, "gone/first", lease.NewToken(), time.Minute)
		first <- err
	}()
	g.waitCount(t, "/v1/leases/acquire", 1)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := leases.Acquire(cctx, "gone/cancelled", lease.NewToken(), time.Minute)
		gaveUp <- err
	}()
	kept := make(chan error, 2)
	for _, k := range []string{"gone/a", "gone/b"} {
		go func() {
			_, err := leases.Acquire(ctx, k, lease.NewToken(), time.Minute)
			kept <- err
		}()
	}
	waitQueued(t, c, 3)
	cancel()
	if err := <-gaveUp; !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call: %v, want ErrUnavailable and context.Canceled", err)
	}
	close(g.gate)
	for range 2 {
		if err := <-kept; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for k, held := range map[string]bool{"gone/a": true, "gone/b": true, "gone/cancelled": false} {
		if info, err := store.Inspect(ctx, k); err != nil || info.Held != held {
			t.Fatalf("%s in the store: %+v, %v; want held %v", k, info, err, held)
		}
	}
}

// Against a server without the batch operation the queued calls are sent
// one by one, and batching stays off afterwards.
func TestBatchFallsBackWithoutTheOperation(t *testing.T) {
	g, store := newGatedServer(t, true)
	c, err := client.New(g.url, &client.Options{Token: testToken, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Leases()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	wg.Go(func() { _, errs[0] = leases.Acquire(ctx, "old/0", lease.NewToken(), time.Minute) })
	g.waitCount(t, "/v1/leases/acquire", 1)
	for i := 1; i < 4; i++ {
		wg.Go(func() { _, errs[i] = leases.Acquire(ctx, fmt.Sprintf("old/%d", i), lease.NewToken(), time.Minute) })
	}
	waitQueued(t, c, 3)
	close(g.gate)
	wg.Wait()
	// Batching is off now: concurrent calls go on their own requests.
	for i := 4; i < 8; i++ {
		wg.Go(func() { _, errs[i] = leases.Acquire(ctx, fmt.Sprintf("old/%d", i), lease.NewToken(), time.Minute) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if info, err := store.Inspect(ctx, fmt.Sprintf("old/%d", i)); err != nil || !info.Held {
			t.Fatalf("old/%d in the store: %+v, %v", i, info, err)
		}
	}
	if n := g.count("/v1/batch"); n != 1 {
		t.Fatalf("%d batch requests, want the one that found none", n)
	}
	if n := g.count("/v1/leases/acquire"); n != 8 {
		t.Fatalf("%d acquire requests, want 8", n)
	}
}

// With MaxInFlight negative every call is a request of its own.
func TestBatchOff(t *testing.T) {
	g, _ := newGatedServer(t, false)
	close(g.gate)
	c, err := client.New(g.url, &client.Options{Token: testToken, MaxInFlight: -1})
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Leases()
	var wg sync.WaitGroup
	errs := make([]error, 30)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = leases.Acquire(context.Background(), fmt.Sprintf("off/%d", i), lease.NewToken(), time.Minute)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n, b := g.count("/v1/leases/acquire"), g.count("/v1/batch"); n != 30 || b != 0 {
		t.Fatalf("%d acquire and %d batch requests, want 30 and 0", n, b)
	}
}
