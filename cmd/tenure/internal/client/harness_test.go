package client_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/internal/fencedkv"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// testToken is the bearer token of the test servers.
const testToken = "test-token-0123456789abcdef"

// testConfig allows testToken everything, without the API's own rate limit
// (the suites send many requests).
func testConfig() *server.Config {
	c := server.AdminConfig(secret.New(testToken))
	c.Rate = -1
	return c
}

// serve starts tenure serve's handler over views on a loopback port and
// stops it when the test ends (or when the returned function is called).
func serve(t testing.TB, views server.Stores, cfg *server.Config) (string, func()) {
	t.Helper()
	if cfg == nil {
		cfg = testConfig()
	}
	srv, err := server.New(views, &server.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	hs := httptest.NewServer(srv)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Drain()
			hs.CloseClientConnections()
			hs.Close()
		}
	}
	t.Cleanup(stop)
	return hs.URL, stop
}

// faults is a RoundTripper that breaks the path to the server: Cut fails
// every request before it is sent; DropReplies sends it (so it applies)
// and then loses the reply, leaving the caller to wait until its context
// ends, as a reply lost on the wire would.
type faults struct {
	inner http.RoundTripper
	mode  atomic.Int32
}

const (
	healthy int32 = iota
	cut
	dropping
)

func (f *faults) Cut()         { f.mode.Store(cut) }
func (f *faults) DropReplies() { f.mode.Store(dropping) }
func (f *faults) Heal()        { f.mode.Store(healthy) }

var errCut = errors.New("connection cut by the test")

func (f *faults) RoundTrip(req *http.Request) (*http.Response, error) {
	switch f.mode.Load() {
	case cut:
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errCut
	case dropping:
		resp, err := f.inner.RoundTrip(req.WithContext(context.WithoutCancel(req.Context())))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return f.inner.RoundTrip(req)
}

// newClient returns a client of base with its own transport, behind
// faults when f is not nil.
func newClient(t testing.TB, base string, f *faults) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if f != nil {
		f.inner = tr
		rt = f
	}
	c, err := client.New(base, &client.Options{Token: testToken, HTTPClient: &http.Client{Transport: rt}})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

// sqliteServe is tenure serve over a SQLite file.
type sqliteServe struct {
	path  string
	store *sqlitestore.Store
	kv    *fencedkv.KV
	url   string
	stop  func()
}

func openSQLite(t testing.TB, path string, o *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, o)
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startSQLite opens path and serves it.
func startSQLite(t testing.TB, path string, o *sqlitestore.Options) *sqliteServe {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "tenure.db")
	}
	s := openSQLite(t, path, o)
	kv, err := fencedkv.New(context.Background(), s.DB(), fencedkv.SQLite, `"tenure_serve_values"`, s)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := fencedkv.NewSessionKV(context.Background(), s.DB(), fencedkv.SQLite, `"tenure_session_values"`, s)
	if err != nil {
		t.Fatal(err)
	}
	url, stop := serve(t, server.Stores{Leases: s.Leases(), Idempotency: s.Idempotency(), Limits: s.Limits(),
		Sessions: s.Sessions(), Schedules: s.Schedules(), Fenced: kv, SessionValues: sv}, nil)
	return &sqliteServe{path: path, store: s, kv: kv, url: url, stop: stop}
}

// resource is the lease suite's fenced value, written through the API's
// fencedWrite; PlainWrite goes around the guard (the negative control).
type resource struct {
	c     *client.Client
	plain func(ctx context.Context, name string, value []byte) error
}

func (r resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.c.FencedWrite(ctx, name, f, []byte(v))
}

func (r resource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.c.HolderWrite(ctx, l, name, []byte(v))
}

func (r resource) PlainWrite(ctx context.Context, name, v string) error {
	return r.plain(ctx, name, []byte(v))
}

func (r resource) Read(ctx context.Context, name string) (string, error) {
	v, _, err := r.c.FencedRead(ctx, name)
	return string(v), err
}

// sessionCommitter is the session suite's Committer through tenure serve:
// writeSessionValue by the session's store ID over hc (the store client's
// transport, behind the target's faults), and read, what the database
// holds. The server checks the session and writes in one step, so hold
// runs before the request (a request authorized, then delayed).
type sessionCommitter struct {
	hc   *http.Client
	url  string
	read func(ctx context.Context, userID, name string) ([]byte, bool, error)
}

func (c sessionCommitter) Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error {
	if hold != nil {
		hold()
	}
	b, err := json.Marshal(serveapi.SessionValueWrite{ID: string(id), Version: version, Name: name, Value: value})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/sessions/write", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", session.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	var p serveapi.Problem
	json.NewDecoder(resp.Body).Decode(&p)
	kind := map[string]error{serveapi.TypeNotFound: session.ErrNotFound, serveapi.TypeConflict: session.ErrConflict,
		serveapi.TypeInvalid: session.ErrInvalid}[p.Type]
	if kind == nil {
		kind = session.ErrUnavailable
	}
	return fmt.Errorf("%w: %d %s: %s", kind, resp.StatusCode, p.Type, p.Detail)
}

func (c sessionCommitter) Read(ctx context.Context, userID, name string) (string, bool, error) {
	v, ok, err := c.read(ctx, userID, name)
	return string(v), ok, err
}

// sqlValue reads a value of tenure_session_values on db (SQLite's
// parameters).
func sqlValue(db *sql.DB, table string) func(ctx context.Context, userID, name string) ([]byte, bool, error) {
	return func(ctx context.Context, userID, name string) ([]byte, bool, error) {
		var v []byte
		err := db.QueryRowContext(ctx, `SELECT value FROM `+table+` WHERE user_id = ? AND name = ?`, userID, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
}
