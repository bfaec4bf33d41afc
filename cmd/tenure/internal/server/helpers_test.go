package server_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/store/memstore"
)

// adminTok is the token allowed everything.
const adminTok = "admin-token-0123456789"

// testConfig allows adminTok everything, without the API's own rate limit.
func testConfig() *server.Config {
	return &server.Config{
		Rate: -1,
		Tokens: []server.Token{
			{Name: "admin", Secret: secret.New(adminTok), Prefixes: []string{""}, Operations: []string{"*"}},
		},
	}
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

// dashEnv is a server over a memory store.
type dashEnv struct {
	mem *memstore.Store
	url string
}

// newDash serves a memory store with the dashboard on a loopback port.
func newDash(t *testing.T, opt *server.Options) *dashEnv {
	t.Helper()
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var o server.Options
	if opt != nil {
		o = *opt
	}
	if o.Config == nil {
		o.Config = testConfig()
	}
	if o.UIRefresh == 0 {
		o.UIRefresh = 100 * time.Millisecond
	}
	o.Logger = slog.New(slog.NewTextHandler(&syncBuf{}, nil))
	srv, err := server.New(server.Stores{Leases: m.Leases(), Idempotency: m.Idempotency(), Limits: m.Limits(),
		Sessions: m.Sessions(), Schedules: m.Schedules(), Fenced: servestore.FencedValues(m)}, &o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &dashEnv{mem: m, url: hs.URL}
}
