package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/internal/testenv"
)

// TestPrometheusScrapesServe: a real Prometheus scraping tenure serve sees
// every instrument of the metrics contract that API traffic records, with
// service.name "tenure" on target_info.
func TestPrometheusScrapesServe(t *testing.T) {
	bin := testenv.RequireBinary(t, "prometheus")
	// service.name as serve sets it, whatever this environment says.
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	dir := t.TempDir()
	addr, _, _, _ := startServe(t, filepath.Join(dir, "data"))
	raw, err := os.ReadFile(filepath.Join(dir, "data", tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))

	// Prometheus on a free port, scraping serve every second.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tenure\n    static_configs:\n      - targets: ['%s']\n", addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// API traffic through every primitive.
	call := func(path string, body any, want int) []byte {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", "http://"+addr+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %s, want %d", path, resp.StatusCode, out, want)
		}
		return out
	}
	var g serveapi.LeaseGrant
	json.Unmarshal(call("/v1/leases/acquire", serveapi.AcquireLease{Key: "reports/daily", TTL: serveapi.Duration(time.Minute)}, 200), &g)
	call("/v1/leases/acquire", serveapi.AcquireLease{Key: "reports/daily", TTL: serveapi.Duration(time.Minute)}, 409)
	call("/v1/leases/renew", serveapi.LeaseToken{Key: "reports/daily", Token: "not-the-holders-token-0123", TTL: serveapi.Duration(time.Minute)}, 409)
	call("/v1/fenced/write", serveapi.FencedWrite{Name: "reports/ledger", Fence: g.Fence, Value: "v1"}, 204)
	call("/v1/fenced/write", serveapi.FencedWrite{Name: "reports/ledger", Fence: g.Fence - 1, Value: "late"}, 409)
	call("/v1/leases/release", serveapi.LeaseToken{Key: "reports/daily", Token: g.Token}, 204)
	var b serveapi.IdemBegun
	json.Unmarshal(call("/v1/idempotency/begin", serveapi.IdemBegin{Scope: "payments", Key: "order-1", Fingerprint: "f"}, 200), &b)
	call("/v1/idempotency/complete", serveapi.IdemClaim{Scope: "payments", Key: "order-1", Token: b.Token, Fence: b.Fence, Outcome: &serveapi.IdemOutcome{Value: []byte("ok")}}, 204)
	call("/v1/idempotency/begin", serveapi.IdemBegin{Scope: "payments", Key: "order-1", Fingerprint: "f"}, 200)
	for range 3 {
		call("/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "user-42", Limit: &serveapi.Limit{Name: "api", Rate: 100, Period: serveapi.Duration(time.Minute)}}}}, 200)
	}
	var s serveapi.SessionRecord
	json.Unmarshal(call("/v1/sessions", serveapi.SessionCreate{UserID: "alice", Idle: serveapi.Duration(time.Hour), Absolute: serveapi.Duration(2 * time.Hour)}, 201), &s)
	call("/v1/sessions/load", serveapi.SessionRef{ID: s.ID}, 200)

	// Each series as Prometheus has it, once a scrape after the traffic
	// has landed. (tenure.schedule.slots is recorded by the nodes that
	// run a Scheduler; serve runs no jobs.)
	want := map[string]string{
		`tenure_lease_acquires_total{outcome="granted",store="sqlitestore"}`:                       "1",
		`tenure_lease_acquires_total{outcome="held",store="sqlitestore"}`:                          "1",
		`tenure_lease_lost_total{store="sqlitestore"}`:                                             "1",
		`tenure_guard_refusals_total{guard="admit",store="sqlitestore"}`:                           "1",
		`tenure_idempotency_requests_total{outcome="executed",store="sqlitestore"}`:                "1",
		`tenure_idempotency_requests_total{outcome="replayed",store="sqlitestore"}`:                "1",
		`tenure_ratelimit_decisions_total{decision="allowed",limit="api",store="sqlitestore"}`:     "3",
		`tenure_session_operations_total{op="create",outcome="ok",store="sqlitestore"}`:            "1",
		`tenure_session_operations_total{op="load",outcome="ok",store="sqlitestore"}`:              "1",
		`tenure_store_duration_seconds_count{op="lease.acquire",outcome="ok",store="sqlitestore"}`: "1",
		`tenure_serve_requests_total{operation="acquireLease",status="409"}`:                       "1",
		`target_info{service_name="tenure"}`:                                                       "1",
	}
	deadline := time.Now().Add(90 * time.Second)
	for q, v := range want {
		for {
			got, err := promQuery(t.Context(), promAddr, q)
			if err == nil && got == v {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus: %s = %q (%v), want %s\n%s", q, got, err, v, logs)
			}
			time.Sleep(200 * time.Millisecond) // Prometheus scrapes once a second
		}
	}
}

// promQuery returns the value of the one series instant query q finds.
func promQuery(ctx context.Context, addr, q string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if r.Status != "success" || len(r.Data.Result) != 1 {
		return "", fmt.Errorf("status %s, %d series", r.Status, len(r.Data.Result))
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v, nil
}
