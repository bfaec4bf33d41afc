package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics and parses the text exposition format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

// value sums the samples of family name whose labels include want (0
// when the family is absent: a counter that never moved is not exposed).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// The example's handler exposes tenure's counters after real operations on
// the memory store and SQLite, and they move by exactly what was done.
func TestMetricsAfterOperations(t *testing.T) {
	handler, shutdown, err := Install()
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	srv := httptest.NewServer(handler)
	defer srv.Close()

	ctx := context.Background()
	w, err := NewWorkload(ctx, filepath.Join(t.TempDir(), "tenure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const rounds = 2
	for range rounds {
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, srv.URL+"/metrics")
	for _, store := range []string{"memstore", "sqlitestore"} {
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"tenure_lease_acquires_total", map[string]string{"outcome": "granted"}, rounds},
			{"tenure_lease_acquires_total", map[string]string{"outcome": "held"}, rounds},
			{"tenure_idempotency_requests_total", map[string]string{"outcome": "executed"}, rounds},
			{"tenure_idempotency_requests_total", map[string]string{"outcome": "replayed"}, rounds},
			{"tenure_ratelimit_decisions_total", map[string]string{"limit": "api", "decision": "allowed"}, 2 * rounds},
			{"tenure_ratelimit_decisions_total", map[string]string{"limit": "api", "decision": "denied"}, rounds},
			{"tenure_session_operations_total", map[string]string{"op": "create", "outcome": "ok"}, rounds},
			{"tenure_session_operations_total", map[string]string{"op": "load", "outcome": "ok"}, rounds},
			{"tenure_session_operations_total", map[string]string{"op": "revoke", "outcome": "ok"}, rounds},
			{"tenure_store_duration_seconds", map[string]string{"op": "lease.acquire", "outcome": "held"}, rounds},
			{"tenure_store_duration_seconds", map[string]string{"op": "ratelimit.decide", "outcome": "ok"}, 3 * rounds},
		} {
			c.labels["store"] = store
			if got := value(t, fams, c.name, c.labels); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
	}
	if got := value(t, fams, "tenure_lease_lost_total", nil); got != 0 {
		t.Errorf("tenure_lease_lost_total = %v, want 0", got)
	}

	// One more round moves the counters by one round's worth.
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, srv.URL+"/metrics")
	if got := value(t, fams, "tenure_lease_acquires_total", map[string]string{"store": "sqlitestore", "outcome": "granted"}); got != rounds+1 {
		t.Errorf("after one more round: granted = %v, want %v", got, rounds+1)
	}
	// No key, user ID or token is a label value.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch v := l.GetValue(); v {
				case "report", "user-1", "client-1", "pay-1", "user:1 POST /payments":
					t.Errorf("%s has the label value %q", name, v)
				}
			}
		}
	}
}
