package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/sqlitestore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// lockedBuf is an output sink safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// startServe runs tenure serve on the embedded default in dir until the
// returned function is called; it returns the address and the outputs.
func startServe(t *testing.T, dir string) (addr string, stdout, stderr *lockedBuf, stop func() error) {
	t.Helper()
	return startServeStore(t, dir, "")
}

// startServeStore is startServe with --store store ("" for the embedded
// default in dir).
func startServeStore(t *testing.T, dir, store string) (addr string, stdout, stderr *lockedBuf, stop func() error) {
	t.Helper()
	return startServeFlags(t, &serveFlags{addr: "127.0.0.1:0", store: store, dataDir: dir, schema: "tenure", drain: 5 * time.Second})
}

// startServeFlags is startServe with the flags f (its listening and
// terminal are set here).
func startServeFlags(t *testing.T, f *serveFlags) (addr string, stdout, stderr *lockedBuf, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &lockedBuf{}, &lockedBuf{}
	addrc := make(chan string, 1)
	f.listening, f.terminal = func(a string) { addrc <- a }, func(io.Writer) bool { return true }
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, f, stdout, stderr) }()
	select {
	case addr = <-addrc:
	case err := <-errc:
		cancel()
		t.Fatalf("serve: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-errc
	}
	t.Cleanup(func() { stop() })
	return addr, stdout, stderr, stop
}

func get(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeEmbeddedDefault: serve creates the data directory, the SQLite
// file and a token (0600, printed once, never logged), answers with it,
// stops cleanly on cancellation, and keeps the token across a restart.
func TestServeEmbeddedDefault(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr, stdout, stderr, stop := startServe(t, dir)
	raw, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))
	if fi, _ := os.Stat(filepath.Join(dir, tokenFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "tenure.db")); err != nil {
		t.Errorf("no embedded file: %v", err)
	}
	if strings.Count(stdout.String(), tok) != 1 {
		t.Errorf("token not printed exactly once:\n%s", stdout)
	}
	base := "http://" + addr
	if st, b := get(t, base+"/healthz", ""); st != 200 || b != "ok "+currentVersion().Short()+"\n" {
		t.Errorf("healthz %d %q, want \"ok\" and %q", st, b, currentVersion().Short())
	}
	if st, _ := get(t, base+"/readyz", ""); st != 200 {
		t.Errorf("readyz %d", st)
	}
	if st, _ := get(t, base+"/v1/leases/inspect?key=a", ""); st != 401 {
		t.Errorf("no token: %d", st)
	}
	if st, b := get(t, base+"/v1/leases/inspect?key=a", tok); st != 200 {
		t.Errorf("with token: %d %s", st, b)
	}
	if st, b := get(t, base+"/metrics", ""); st != 200 || !strings.Contains(b, "tenure_serve_requests_total") {
		t.Errorf("metrics %d:\n%s", st, b)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if strings.Contains(stderr.String(), tok) {
		t.Fatalf("the token appears in the log:\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "api=http://"+addr+"/v1") {
		t.Errorf("the log does not say where the API is:\n%s", stderr)
	}

	addr, stdout, _, _ = startServe(t, dir)
	if strings.Contains(stdout.String(), tok) {
		t.Errorf("token printed again on restart:\n%s", stdout)
	}
	if st, _ := get(t, "http://"+addr+"/v1/leases/inspect?key=a", tok); st != 200 {
		t.Errorf("kept token refused after restart: %d", st)
	}
}

// serveOnce starts serve with f, waits until it listens, and stops it.
func serveOnce(t *testing.T, f *serveFlags, stdout, stderr io.Writer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan string, 1)
	f.drain, f.listening = time.Second, func(a string) { addrc <- a }
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, f, stdout, stderr) }()
	select {
	case <-addrc:
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestServeTokenNotOnALog: when standard output is not a terminal (a
// service manager's log), a new token is written to its file only and
// the output says where it is.
func TestServeTokenNotOnALog(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr lockedBuf
	serveOnce(t, &serveFlags{addr: "127.0.0.1:0", dataDir: dir, schema: "tenure"}, &stdout, &stderr)
	tok := serveToken(t, dir)
	if strings.Contains(stdout.String(), tok) || strings.Contains(stderr.String(), tok) {
		t.Fatalf("the token was printed to a non-terminal:\n%s\n%s", stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), filepath.Join(dir, tokenFile)) {
		t.Errorf("the output does not say where the token is:\n%s", stdout.String())
	}
}

// TestServeFailsBeforeMinting: a store that is not ready fails the start
// with the command that prepares it, and no token is made.
func TestServeFailsBeforeMinting(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(t.TempDir(), "app.db")
	err := runServe(t.Context(), &serveFlags{addr: "127.0.0.1:0", dataDir: dir, store: "sqlite:" + missing, schema: "tenure"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "tenure migrate up --store sqlite:"+missing) {
		t.Errorf("a SQLite file that does not exist: %v, want the migrate command", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("serve created the SQLite file named by --store")
	}
	if _, err := os.Stat(filepath.Join(dir, tokenFile)); err == nil {
		t.Error("a token was made although the start failed")
	}
}

// TestServeWarnsOnPlainHTTPOffLoopback: listening on an address other
// hosts reach, without TLS, is logged as a warning.
func TestServeWarnsOnPlainHTTPOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}} {
		var stderr lockedBuf
		serveOnce(t, &serveFlags{addr: c.addr, dataDir: t.TempDir(), schema: "tenure"}, io.Discard, &stderr)
		if got := strings.Contains(stderr.String(), "level=WARN msg=\"serving plain HTTP"); got != c.warn {
			t.Errorf("--addr %s: warned %v, want %v:\n%s", c.addr, got, c.warn, stderr.String())
		}
	}
}

// TestServeBadFlags: bad input exits with status 2 and starts nothing.
func TestServeBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []*serveFlags{
		{addr: "127.0.0.1:0", dataDir: dir, tlsCert: "c.pem"},
		{addr: "127.0.0.1:0", dataDir: dir, store: "bogus://x"},
		{addr: "127.0.0.1:0", dataDir: dir, config: filepath.Join(dir, "missing.json")},
		{addr: "127.0.0.1:0", dataDir: dir, sweep: -time.Second},
	} {
		err := runServe(t.Context(), f, io.Discard, io.Discard)
		var e exitErr
		if !asExit(err, &e) || e.code != 2 {
			t.Errorf("%+v: %v, want exit 2", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tenure.db")); err == nil {
		t.Error("bad flags created the embedded file")
	}
}

func asExit(err error, e *exitErr) bool {
	x, ok := err.(exitErr)
	if ok {
		*e = x
	}
	return ok
}

// serve --rls-addr answers Envoy's ShouldRateLimit over gRPC with the
// limits of --rls-config, on the same store as the HTTP API.
func TestServeEnvoyRateLimitService(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(cfg, []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rlsAddr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 1)
	f := &serveFlags{addr: "127.0.0.1:0", dataDir: dir, schema: "tenure", drain: 5 * time.Second,
		rlsAddr: rlsAddr, rlsConfig: cfg, listening: func(a string) { started <- a }}
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, f, &lockedBuf{}, &lockedBuf{}) }()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.7"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/no-rule"}}},
	}}
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := c.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode)
		if st := resp.Statuses[1]; st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the descriptor with no rule: %v", st)
		}
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes %v, want %v (2 per minute)", codes, want)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve stopped with %v", err)
	}
}

func TestServeRLSNeedsConfig(t *testing.T) {
	f := &serveFlags{addr: "127.0.0.1:0", dataDir: t.TempDir(), schema: "tenure", drain: time.Second, rlsAddr: "127.0.0.1:0"}
	err := runServe(t.Context(), f, &lockedBuf{}, &lockedBuf{})
	var e exitErr
	if !errors.As(err, &e) || e.code != 2 || !strings.Contains(err.Error(), "--rls-config") {
		t.Fatalf("serve --rls-addr without --rls-config: %v", err)
	}
}

// TestServeFailsBeforeMintingPostgres: serve on a PostgreSQL schema that
// does not exist fails with the exact migrate command (the password left
// out) and makes no token; the command it names then prepares the schema
// and serve starts.
func TestServeFailsBeforeMintingPostgres(t *testing.T) {
	dsn := testenv.SharedPostgres(t).NewDatabase(t)
	dir := t.TempDir()
	err := runServe(t.Context(), &serveFlags{addr: "127.0.0.1:0", dataDir: dir, store: dsn, schema: "billing"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "`tenure migrate up --store ") || !strings.Contains(err.Error(), " --schema billing`") {
		t.Fatalf("an unmigrated schema: %v, want the migrate command", err)
	}
	if _, err := os.Stat(filepath.Join(dir, tokenFile)); err == nil {
		t.Error("a token was made although the start failed")
	}
	if code := runJSON(t, &statusOut{}, "migrate", "up", "--store", dsn, "--schema", "billing"); code != 0 {
		t.Fatalf("migrate up: exit %d", code)
	}
	serveOnce(t, &serveFlags{addr: "127.0.0.1:0", dataDir: dir, store: dsn, schema: "billing"}, io.Discard, io.Discard)
	if _, err := os.Stat(filepath.Join(dir, tokenFile)); err != nil {
		t.Errorf("no token after a start that succeeded: %v", err)
	}
}

// TestServeSweeps: serve deletes the rows of ended leases on its own
// (--sweep-interval), so the embedded file does not keep one per key ever
// locked; with --sweep-interval 0 it keeps them.
func TestServeSweeps(t *testing.T) {
	for _, every := range []time.Duration{20 * time.Millisecond, 0} {
		dir := filepath.Join(t.TempDir(), "data")
		startServeFlags(t, &serveFlags{addr: "127.0.0.1:0", dataDir: dir, schema: "tenure", drain: 5 * time.Second, sweep: every})
		db, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "tenure.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		ls := db.Leases()
		for i := range 20 {
			k, tok := fmt.Sprintf("order/%d", i), lease.NewToken()
			if _, err := ls.Acquire(t.Context(), k, tok, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(t.Context(), k, tok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ls.Acquire(t.Context(), "held", lease.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
		rows := func() int {
			var n int
			if err := db.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM tenure_leases`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if every == 0 {
			// Nothing sweeps: a sweep of its own shows what serve kept.
			r, err := db.Sweep(t.Context(), retention.Options{})
			if err != nil || r.Deleted[retention.Leases] != 20 {
				t.Fatalf("--sweep-interval 0: the rows of 20 ended leases should be left to sweep, Sweep = %+v, %v", r, err)
			}
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); rows() != 1; {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s serve still keeps %d lease rows, want 1 (the held one)", rows())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
