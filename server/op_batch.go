package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
)

// MaxBatchCalls is the most calls one batch request may carry.
const MaxBatchCalls = 128

// batchOps is the batch operation: calls of the POST operations that
// answer at once, served together in one request. A client with many
// concurrent callers (package client) sends the calls that queue behind
// its requests in flight this way, so that the HTTP round trip, the
// token's check and the log line are paid once per batch, not per call.
var batchOps = []operation{
	&op[serveapi.Batch, serveapi.BatchResults]{Method: "POST", Path: "/v1/batch", ID: "batch",
		Needs: anyView, Handle: batch,
		Doc: "Serve calls of other POST operations together, concurrently, and answer each in order with the status and " +
			"body (or problem) its own request would have had. Each call is checked as its own request would be: the " +
			"token's operations and namespaces, and one unit of the token's rate limit per call; any token may send a batch. " +
			"An acquire that waits (wait above 0) cannot be batched.",
		Example: serveapi.Batch{Calls: []serveapi.BatchCall{
			{Operation: "allowRate", Body: []byte(`{"requests":[{"key":"user:42","limit":{"name":"api","rate":100,"period":"1m"}}]}`)},
			{Operation: "releaseLease", Body: []byte(`{"key":"billing/close-month","token":"R7FJKTDJ6NNMY7V2J5BMYEMBIO"}`)},
		}}},
}

// batchCall serves one call of a batch on s: its body decoded strictly as
// the operation's input, then as the operation's own request.
type batchCall func(ctx context.Context, r *request, body []byte) serveapi.BatchResult

// batchable returns the calls a batch may carry: every POST operation but
// the batch itself, by operation ID.
func batchable(s *Server) map[string]batchCall {
	m := map[string]batchCall{}
	for _, o := range operations {
		d := o.spec()
		if d.Method != http.MethodPost || d.OperationID == "batch" {
			continue
		}
		m[d.OperationID] = o.call(s)
	}
	return m
}

// call returns the batch call of the operation on s.
func (o *op[In, Out]) call(s *Server) batchCall {
	status := o.spec().status
	scope := scopeField(o.spec())
	return func(ctx context.Context, r *request, body []byte) serveapi.BatchResult {
		var in In
		if err := serveapi.DecodeStrict(body, &in); err != nil {
			return batchProblem(ctx, s, o.ID, invalidf("the body of the %s call is not valid: %v", o.ID, err))
		}
		out, err := o.run(ctx, r, scope, &in)
		if err != nil {
			return batchProblem(ctx, s, o.ID, err)
		}
		if status == http.StatusNoContent {
			return serveapi.BatchResult{Status: status}
		}
		b, err := serveapi.Marshal(out)
		if err != nil {
			return batchProblem(ctx, s, o.ID, err)
		}
		return serveapi.BatchResult{Status: status, Body: b}
	}
}

// batchProblem is the result of a call that failed with err. A store's
// error text goes to the log, as for a request of its own, and the answer
// says so.
func batchProblem(ctx context.Context, s *Server, op string, err error) serveapi.BatchResult {
	p := problemOf(err)
	if _, ok := err.(*problemError); !ok && (p.Type == serveapi.TypeUnavailable || p.Type == serveapi.TypeInternal) {
		id := newRequestID()
		s.log.WarnContext(ctx, "batch call failed", "op", op, "call", id, "err", err)
		p.Detail = "the store did not answer"
		if p.Type == serveapi.TypeInternal {
			p.Detail = "internal error"
		}
		p.Instance = "urn:tenure:request:" + id
		p.Detail += " (call " + id + "; the server's log has the cause)"
	}
	return serveapi.BatchResult{Status: p.Status, Problem: &p}
}

// batch serves a batch's calls concurrently (a store that pipelines, as
// Redis does, sends them together; one with a pool of connections uses
// several) and answers in order.
func batch(ctx context.Context, r *request, in serveapi.Batch) (serveapi.BatchResults, error) {
	s := r.s
	n := len(in.Calls)
	if n == 0 || n > MaxBatchCalls {
		return serveapi.BatchResults{}, invalidf("a batch has 1 to %d calls, not %d", MaxBatchCalls, n)
	}
	calls := make([]batchCall, n)
	for i, c := range in.Calls {
		call, ok := s.batchCalls[c.Operation]
		if !ok {
			return serveapi.BatchResults{}, invalidf("call %d: %q is not an operation a batch may call (the POST operations but batch)", i, c.Operation)
		}
		if len(c.Body) == 0 || string(c.Body) == "null" {
			return serveapi.BatchResults{}, invalidf("call %d (%s) has no body", i, c.Operation)
		}
		calls[i] = call
	}
	// The batch's own request took one unit of the token's limit.
	if ok, wait := s.charge(ctx, r.p.t.name, n-1); !ok {
		return serveapi.BatchResults{}, &problemError{serveapi.NewProblem(serveapi.TypeRateLimited,
			fmt.Sprintf("token %q is over %d requests per %v (a batch of %d calls; retry in %v)", r.p.t.name, s.cfg.Rate, s.cfg.Period, n, wait.Round(time.Millisecond)))}
	}
	out := serveapi.BatchResults{Results: make([]serveapi.BatchResult, n)}
	serve := func(i int) {
		c := in.Calls[i]
		if !r.p.t.all && !r.p.t.ops[c.Operation] {
			p := serveapi.NewProblem(serveapi.TypeForbidden, fmt.Sprintf("token %q may not call %s", r.p.t.name, c.Operation))
			out.Results[i] = serveapi.BatchResult{Status: p.Status, Problem: &p}
			return
		}
		out.Results[i] = calls[i](ctx, &request{s: s, p: r.p, batch: true}, c.Body)
	}
	if n == 1 {
		serve(0)
		return out, nil
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { serve(i) })
	}
	wg.Wait()
	return out, nil
}
