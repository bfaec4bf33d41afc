package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &lockedBuf{}, &lockedBuf{}
	addrc := make(chan string, 1)
	f := &serveFlags{addr: "127.0.0.1:0", dataDir: dir, schema: "tenure", drain: 5 * time.Second,
		listening: func(a string) { addrc <- a }}
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
	if st, _ := get(t, base+"/healthz", ""); st != 200 {
		t.Errorf("healthz %d", st)
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

// TestServeBadFlags: bad input exits with status 2 and starts nothing.
func TestServeBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []*serveFlags{
		{addr: "127.0.0.1:0", dataDir: dir, tlsCert: "c.pem"},
		{addr: "127.0.0.1:0", dataDir: dir, store: "bogus://x"},
		{addr: "127.0.0.1:0", dataDir: dir, config: filepath.Join(dir, "missing.json")},
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
