package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/server"
)

// TestDefaultClientKeepsConnections checks that the default HTTP client
// keeps a connection per concurrent caller alive between calls: rounds of
// concurrent calls reuse the connections of the first round. With
// net/http's default of 2 idle connections per host, every round opened
// (and closed) a connection for most of its calls.
func TestDefaultClientKeepsConnections(t *testing.T) {
	const (
		callers = 20
		rounds  = 5
	)
	m := newMem(t, nil)
	srv, err := server.New(server.Stores{Leases: m.Leases()},
		&server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Count the connections the server accepts.
	var opened atomic.Int64
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, &client.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Leases()
	ctx := context.Background()
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				_, errs[i] = leases.Inspect(ctx, "keepalive/"+string(rune('a'+i)))
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
	}
	if info, err := leases.Inspect(ctx, "keepalive/a"); err != nil || info.Held {
		t.Fatalf("Inspect = %+v, %v; want a free key", info, err)
	}
	// The first round may dial a few more connections than it uses.
	if n := opened.Load(); n > 2*callers {
		t.Fatalf("%d connections opened for %d rounds of %d concurrent calls, want at most %d", n, rounds, callers, 2*callers)
	}
}
