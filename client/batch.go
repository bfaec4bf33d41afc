package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/tenurekit/tenure/internal/serveapi"
)

// batchOps are the calls the client may batch, by path: the POST
// operations that answer at once, with their operation IDs.
var batchOps = map[string]string{
	"/v1/leases/acquire":       "acquireLease", // AcquireWait sends its own request
	"/v1/leases/renew":         "renewLease",
	"/v1/leases/release":       "releaseLease",
	"/v1/leases/leave":         "leaveLeaseQueue",
	"/v1/fenced/write":         "fencedWrite",
	"/v1/fenced/holder-write":  "fencedHolderWrite",
	"/v1/rate/allow":           "allowRate",
	"/v1/rate/reset":           "resetRate",
	"/v1/permits/acquire":      "acquirePermit",
	"/v1/permits/renew":        "renewPermit",
	"/v1/permits/release":      "releasePermit",
	"/v1/idempotency/begin":    "beginIdempotency",
	"/v1/idempotency/renew":    "renewIdempotency",
	"/v1/idempotency/complete": "completeIdempotency",
	"/v1/idempotency/release":  "releaseIdempotency",
	"/v1/sessions":             "createSession",
	"/v1/sessions/load":        "loadSession",
	"/v1/sessions/touch":       "touchSession",
	"/v1/sessions/save":        "saveSession",
	"/v1/sessions/rotate":      "rotateSession",
	"/v1/sessions/revoke":      "revokeSession",
	"/v1/sessions/revoke-user": "revokeUserSessions",
	"/v1/sessions/write":       "writeSessionValue",
}

// maxBatchedBody is the largest request body a call may have to go in a
// batch; a larger one (a session's data, an idempotent result) is sent on
// its own, so that a batch stays far below the server's body limit.
const maxBatchedBody = 4 << 10

// batcher sends the client's batchable calls: at once while fewer than
// max requests are in flight, and otherwise queued, to go together in the
// next batch request a finishing request sends.
type batcher struct {
	c   *Client
	max int

	mu       sync.Mutex
	inflight int        // requests in flight (each holds a slot)
	queue    []*pending // calls waiting for a slot
	// off is set once the server answered a batch with not_found: it has
	// no batch operation, and every call goes on its own.
	off atomic.Bool
}

// pending is a queued call.
type pending struct {
	ctx      context.Context
	m        mapping
	path, op string
	body     []byte
	out      any
	state    atomic.Int32 // pendingWaiting, then taken by one side
	done     chan error   // the outcome, once delivered
}

// The states of a pending call: waiting, given up by its caller (its
// context ended; it is then never sent, or its answer is dropped), or
// being answered by a batch (the caller waits for done).
const (
	pendingWaiting int32 = iota
	pendingGivenUp
	pendingAnswered
)

// do runs one batchable call.
func (b *batcher) do(ctx context.Context, m mapping, path, op string, in, out any) error {
	body, err := serveapi.Marshal(in)
	if err != nil {
		return errors.Join(m.unavailable, err)
	}
	if len(body) > maxBatchedBody || b.off.Load() {
		return b.c.sendBody(ctx, m, path, body, out)
	}
	b.mu.Lock()
	if b.inflight < b.max {
		b.inflight++
		b.mu.Unlock()
		err := b.c.sendBody(ctx, m, path, body, out)
		b.finish()
		return err
	}
	p := &pending{ctx: ctx, m: m, path: path, op: op, body: body, out: out, done: make(chan error, 1)}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		if p.state.CompareAndSwap(pendingWaiting, pendingGivenUp) {
			// Never sent, or sent and its answer dropped: unknown either
			// way, as for a request of its own whose context ended.
			return fmt.Errorf("%w: %w", m.unavailable, &transportError{ctx.Err()})
		}
		return <-p.done
	}
}

// finish gives a request's slot up, or hands it to a goroutine that sends
// the calls queued meanwhile.
func (b *batcher) finish() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.drain()
}

// drain sends the queued calls, a batch at a time, until none is left,
// then gives its slot up.
func (b *batcher) drain() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), MaxBatchCalls)
		if n == 0 {
			b.inflight--
			b.queue = nil
			b.mu.Unlock()
			return
		}
		calls := make([]*pending, n)
		copy(calls, b.queue)
		clear(b.queue[:n]) // the queue's array keeps no call it sent
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.send(calls)
	}
}

// send sends calls: one on its own, more in a batch request.
func (b *batcher) send(calls []*pending) {
	live := calls[:0]
	for _, p := range calls {
		if p.state.Load() != pendingGivenUp {
			live = append(live, p)
		}
	}
	switch {
	case len(live) == 0:
		return
	case len(live) == 1 || b.off.Load():
		b.alone(live)
		return
	}
	// The batch's request ends when every caller in it gave up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int32
	left.Store(int32(len(live)))
	for _, p := range live {
		stop := context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	body := batchBody(live)
	status, problem, ab, err := b.c.roundTrip(ctx, http.MethodPost, "/v1/batch", nil, body)
	if err != nil {
		for _, p := range live {
			p.deliver(func() error { return fmt.Errorf("%w: %w", p.m.unavailable, &transportError{err}) })
		}
		return
	}
	if status != http.StatusOK {
		var pr serveapi.Problem
		if problem && serveapi.Unmarshal(ab, &pr) == nil && pr.Type == serveapi.TypeNotFound && status == http.StatusNotFound {
			// A server without the batch operation.
			b.off.Store(true)
			b.alone(live)
			return
		}
		for _, p := range live {
			p.deliver(func() error { return answer(p.m, http.MethodPost, p.path, status, problem, ab, nil) })
		}
		return
	}
	var res serveapi.BatchResults
	if err := serveapi.Unmarshal(ab, &res); err != nil || len(res.Results) != len(live) {
		if err == nil {
			err = fmt.Errorf("%d results for %d calls", len(res.Results), len(live))
		}
		for _, p := range live {
			p.deliver(func() error {
				return fmt.Errorf("%w: tenure serve: malformed answer to a batch: %v", p.m.unavailable, err)
			})
		}
		return
	}
	for i, p := range live {
		r := res.Results[i]
		p.deliver(func() error {
			if r.Problem != nil {
				pr := *r.Problem
				if pr.Type == "" {
					pr = serveapi.NewProblem(serveapi.TypeUnavailable, "a batch result of status "+strconv.Itoa(r.Status)+" without a problem")
				}
				return problemError(p.m, pr)
			}
			return answer(p.m, http.MethodPost, p.path, r.Status, false, r.Body, p.out)
		})
	}
}

// alone sends each call on a request of its own, concurrently.
func (b *batcher) alone(calls []*pending) {
	var wg sync.WaitGroup
	for _, p := range calls {
		wg.Go(func() {
			p.deliver(func() error { return b.c.sendBody(p.ctx, p.m, p.path, p.body, p.out) })
		})
	}
	wg.Wait()
}

// deliver answers the call with what answer returns (which may write its
// out), unless its caller gave up.
func (p *pending) deliver(answer func() error) {
	if p.state.CompareAndSwap(pendingWaiting, pendingAnswered) {
		p.done <- answer()
	}
}

// batchBody is the body of the batch of calls: their bodies as they are.
func batchBody(calls []*pending) []byte {
	n := 16
	for _, p := range calls {
		n += len(p.op) + len(p.body) + 32
	}
	b := make([]byte, 0, n)
	b = append(b, `{"calls":[`...)
	for i, p := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"operation":"`...)
		b = append(b, p.op...)
		b = append(b, `","body":`...)
		b = append(b, p.body...)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// sendBody sends one POST with an encoded body.
func (c *Client) sendBody(ctx context.Context, m mapping, path string, body []byte, out any) error {
	status, problem, b, err := c.roundTrip(ctx, http.MethodPost, path, nil, body)
	if err != nil {
		return fmt.Errorf("%w: %w", m.unavailable, &transportError{err})
	}
	return answer(m, http.MethodPost, path, status, problem, b, out)
}
