package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/server"
)

// allowRateAllocs returns the heap allocations of one allowRate request
// served by srv (the handler, not the network), after checking its answer.
func allowRateAllocs(t *testing.T, srv *server.Server) float64 {
	t.Helper()
	const body = `{"requests":[{"key":"k","limit":{"name":"api","rate":1000000,"period":"1s"}}]}`
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/rate/allow", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminTok)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	rec := serve()
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("allowRate answered %d %s", rec.Code, rec.Body)
	}
	return testing.AllocsPerRun(200, func() { serve() })
}

// TestAllowRateBuildsNoTelemetry checks that a rate decision through the
// API does not set up a limiter's instrumentation for every request (the
// limit is only validated and normalized; the store decides): that used to
// cost about 115 allocations (of 180) and a tenth of the server's CPU per
// decision. The bound leaves room for the request, the JSON and the store.
// maxAllowRateAllocs bounds the allocations of one allowRate request.
const maxAllowRateAllocs = 100

func TestAllowRateBuildsNoTelemetry(t *testing.T) {
	_, st := memStores(t)
	srv, err := server.New(server.Stores{Limits: st.Limits},
		&server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	got := allowRateAllocs(t, srv)
	t.Logf("%.0f allocations per allowRate request", got)
	if got > maxAllowRateAllocs {
		t.Fatalf("%.0f allocations per allowRate request, want at most %d", got, maxAllowRateAllocs)
	}
}
