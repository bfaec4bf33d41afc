package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
)

// batchOf returns a batch body of calls of op with the given bodies.
func batchOf(op string, bodies ...string) serveapi.Batch {
	var b serveapi.Batch
	for _, body := range bodies {
		b.Calls = append(b.Calls, serveapi.BatchCall{Operation: op, Body: json.RawMessage(body)})
	}
	return b
}

// results decodes a 200 answer to a batch.
func results(t *testing.T, status int, b []byte) []serveapi.BatchResult {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("batch answered %d: %s", status, b)
	}
	var r serveapi.BatchResults
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Results
}

// TestBatchChecksEachCall: every call of a batch is checked as its own
// request would be (namespaces, its body, an acquire that would wait), and
// answered with its own status; a call another token may not make is
// forbidden alone.
func TestBatchChecksEachCall(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	b := batchOf("acquireLease",
		`{"key":"billing/a","ttl":"1m"}`,
		`{"key":"other/a","ttl":"1m"}`,
		`{"key":"billing/b","ttl":"1m","wait":"1s"}`,
		`{"key":"billing/c","ttl":"1m","bogus":1}`,
	)
	b.Calls = append(b.Calls, serveapi.BatchCall{Operation: "releaseLease", Body: json.RawMessage(`{"key":"billing/d","token":"R7FJKTDJ6NNMY7V2J5BMYEMBIO"}`)})
	st, body, _ := e.do(t, billTok, "POST", "/v1/batch", b)
	res := results(t, st, body)
	want := []struct {
		status int
		typ    string
	}{{200, ""}, {403, serveapi.TypeForbidden}, {400, serveapi.TypeInvalid}, {400, serveapi.TypeInvalid}, {409, serveapi.TypeNotHeld}}
	if len(res) != len(want) {
		t.Fatalf("%d results for %d calls: %+v", len(res), len(want), res)
	}
	for i, w := range want {
		r := res[i]
		if r.Status != w.status || (w.typ == "") != (r.Problem == nil) || (r.Problem != nil && (r.Problem.Type != w.typ || r.Problem.Status != w.status)) {
			t.Errorf("call %d: %+v (problem %+v), want %d %s", i, r, r.Problem, w.status, w.typ)
		}
	}
	var g serveapi.LeaseGrant
	if err := json.Unmarshal(res[0].Body, &g); err != nil || g.Fence == 0 || g.Token == "" || g.Key != "billing/a" {
		t.Fatalf("grant %s: %+v, %v", res[0].Body, g, err)
	}
	for key, held := range map[string]bool{"billing/a": true, "other/a": false, "billing/b": false, "billing/c": false} {
		info, err := e.mem.Leases().Inspect(ctx, key)
		if err != nil || info.Held != held || (held && info.Fence != g.Fence) {
			t.Errorf("%s in the store: %+v, %v; want held %v", key, info, err, held)
		}
	}
	// A token that may only read may send a batch, and each call in it is
	// forbidden.
	st, body, _ = e.do(t, readerTok, "POST", "/v1/batch", batchOf("releaseLease", `{"key":"billing/a","token":"`+g.Token+`"}`))
	if res := results(t, st, body); len(res) != 1 || res[0].Status != 403 || res[0].Problem == nil || res[0].Problem.Type != serveapi.TypeForbidden {
		t.Fatalf("a read-only token's release in a batch: %+v", res)
	}
	if info, err := e.mem.Leases().Inspect(ctx, "billing/a"); err != nil || !info.Held {
		t.Fatalf("a forbidden release released billing/a: %+v, %v", info, err)
	}
}

// TestBatchRefusedWhole: a batch with an operation it may not carry, a
// call without a body, or too many calls is refused whole, and nothing
// of it is done.
func TestBatchRefusedWhole(t *testing.T) {
	e := newEnv(t, nil)
	acquire := serveapi.BatchCall{Operation: "acquireLease", Body: json.RawMessage(`{"key":"whole/a","ttl":"1m"}`)}
	many := serveapi.Batch{}
	for i := range server.MaxBatchCalls + 1 {
		many.Calls = append(many.Calls, serveapi.BatchCall{Operation: "acquireLease", Body: json.RawMessage(fmt.Sprintf(`{"key":"whole/%d","ttl":"1m"}`, i))})
	}
	for name, b := range map[string]any{
		"a GET operation":     serveapi.Batch{Calls: []serveapi.BatchCall{acquire, {Operation: "inspectLease", Body: json.RawMessage(`{"key":"a"}`)}}},
		"a batch in a batch":  serveapi.Batch{Calls: []serveapi.BatchCall{acquire, {Operation: "batch", Body: json.RawMessage(`{"calls":[]}`)}}},
		"no such operation":   serveapi.Batch{Calls: []serveapi.BatchCall{acquire, {Operation: "nope", Body: json.RawMessage(`{}`)}}},
		"a call without body": `{"calls":[{"operation":"acquireLease","body":{"key":"whole/a","ttl":"1m"}},{"operation":"releaseLease"}]}`,
		"no calls":            serveapi.Batch{Calls: []serveapi.BatchCall{}},
		"too many calls":      many,
	} {
		st, body, h := e.do(t, adminTok, "POST", "/v1/batch", b)
		if p := problem(t, st, body, h, http.StatusBadRequest, serveapi.TypeInvalid); p.Detail == "" {
			t.Errorf("%s: a problem without detail", name)
		}
	}
	keys, err := e.mem.Leases().(lease.Lister).List(t.Context(), "whole/", "", 1000)
	if err != nil || len(keys) != 0 {
		t.Fatalf("refused batches left %d keys: %+v, %v", len(keys), keys, err)
	}
}

// TestBatchChargesEachCall: a batch takes one unit of the token's API rate
// limit per call; one over the limit is refused whole, and nothing of it
// is done.
func TestBatchChargesEachCall(t *testing.T) {
	cfg := testConfig()
	cfg.Rate, cfg.Period = 5, time.Hour
	e := newEnv(t, cfg)
	body := func(keys ...string) serveapi.Batch {
		var bs []string
		for _, k := range keys {
			bs = append(bs, `{"key":"`+k+`","ttl":"1m"}`)
		}
		return batchOf("acquireLease", bs...)
	}
	st, b, h := e.do(t, adminTok, "POST", "/v1/batch", body("rate/a", "rate/b", "rate/c", "rate/d", "rate/e", "rate/f"))
	problem(t, st, b, h, http.StatusTooManyRequests, serveapi.TypeRateLimited)
	if info, err := e.mem.Leases().Inspect(t.Context(), "rate/a"); err != nil || info.Held {
		t.Fatalf("a refused batch acquired rate/a: %+v, %v", info, err)
	}
	// 1 unit went to the refused batch's request: 4 are left.
	st, b, _ = e.do(t, adminTok, "POST", "/v1/batch", body("rate/a", "rate/b", "rate/c", "rate/d"))
	for i, r := range results(t, st, b) {
		if r.Status != 200 {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	st, b, h = e.do(t, adminTok, "GET", "/v1/leases/inspect?key=rate/a", nil)
	problem(t, st, b, h, http.StatusTooManyRequests, serveapi.TypeRateLimited)
}

// downAcquire is a lease store whose acquires fail as a store that cannot
// be reached does, with the text a driver gives.
type downAcquire struct{ lease.Store }

func (downAcquire) Acquire(context.Context, string, string, time.Duration) (lease.Grant, error) {
	return lease.Grant{}, fmt.Errorf("%w: dial tcp 10.9.8.7:5432: connect: connection refused (user app, database billing)", lease.ErrUnavailable)
}

// TestBatchStoreErrorLoggedNotAnswered: a call's store error stays in the
// server's log under an ID the call's problem names.
func TestBatchStoreErrorLoggedNotAnswered(t *testing.T) {
	m, st := memStores(t)
	st.Leases = downAcquire{m.Leases()}
	logs := &syncBuf{}
	srv, err := server.New(st, &server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{url: hs.URL, logs: logs}
	status, b, _ := e.do(t, adminTok, "POST", "/v1/batch", batchOf("acquireLease", `{"key":"down/a","ttl":"1m"}`, `{"key":"down/b","ttl":"1m"}`))
	for _, r := range results(t, status, b) {
		p := r.Problem
		if r.Status != http.StatusServiceUnavailable || p == nil || p.Type != serveapi.TypeUnavailable || !strings.HasPrefix(p.Instance, "urn:tenure:request:") {
			t.Fatalf("result %+v (problem %+v)", r, p)
		}
		id := strings.TrimPrefix(p.Instance, "urn:tenure:request:")
		if !strings.Contains(p.Detail, id) || strings.Contains(p.Detail, "10.9.8.7") {
			t.Fatalf("detail %q", p.Detail)
		}
		found := false
		for l := range strings.SplitSeq(logs.String(), "\n") {
			found = found || (strings.Contains(l, "call="+id) && strings.Contains(l, "level=WARN") && strings.Contains(l, "10.9.8.7"))
		}
		if !found {
			t.Fatalf("no warning with the cause under call %s in the log:\n%s", id, logs.String())
		}
	}
	if strings.Contains(string(b), "10.9.8.7") {
		t.Fatalf("the answer shows the store's address: %s", b)
	}
}
