package proof

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

// Modes of a workload: the guarded run uses tenure's checks; the control
// runs the same steps without them.
const (
	Guarded = "guarded"
	Control = "control"
)

// Status is what is known about an operation's outcome.
type Status string

// The outcomes of an operation.
const (
	// OK: the operation completed and took effect as reported.
	OK Status = "ok"
	// Fail: the operation completed and definitely took no effect.
	Fail Status = "fail"
	// Unknown: the operation may or may not have taken effect (a timeout,
	// a lost reply, a worker killed while it was in flight). It is never
	// counted as acknowledged.
	Unknown Status = "unknown"
)

// Event is one line of a worker's history stream: the invocation or the
// completion of an operation.
type Event struct {
	// Ev is "invoke" or the completion's Status.
	Ev string `json:"ev"`
	// ID numbers the operation within its process.
	ID int64 `json:"id"`
	// Proc names the worker process (or goroutine) and its incarnation.
	Proc string `json:"proc"`
	// Mode is Guarded or Control.
	Mode string `json:"mode,omitempty"`
	// F is the operation ("acquire", "read", "write", "do", ...).
	F string `json:"f,omitempty"`
	// Key is what the operation acts on.
	Key string `json:"key,omitempty"`
	// Value is the input at invocation and the output at completion.
	Value string `json:"value,omitempty"`
	// Fence is the fence the operation carried or was granted.
	Fence uint64 `json:"fence,omitempty"`
	// Err is the kind of error of a completion that was not OK.
	Err string `json:"err,omitempty"`
	// T is the wall-clock time of the event in Unix nanoseconds (workers
	// run on one machine, so their clocks agree).
	T int64 `json:"t"`
}

// Op is one operation of a history: its invocation and, when it is known,
// its completion.
type Op struct {
	Proc   string `json:"proc"`
	Mode   string `json:"mode"`
	F      string `json:"f"`
	Key    string `json:"key,omitempty"`
	In     string `json:"in,omitempty"`
	Out    string `json:"out,omitempty"`
	Fence  uint64 `json:"fence,omitempty"`
	Status Status `json:"status"`
	Err    string `json:"err,omitempty"`
	// Invoke and Complete are Unix nanoseconds; Complete is 0 when the
	// operation never completed (its worker was killed or stopped).
	Invoke   int64 `json:"invoke"`
	Complete int64 `json:"complete,omitempty"`
}

// History is every operation of one run, in invocation order.
type History struct {
	Ops []Op `json:"ops"`
}

// Select returns the operations of mode with function f ("" for all).
func (h *History) Select(mode, f string) []Op {
	var out []Op
	for _, op := range h.Ops {
		if op.Mode == mode && (f == "" || op.F == f) {
			out = append(out, op)
		}
	}
	return out
}

// builder pairs invocations with completions as events arrive.
type builder struct {
	mu      sync.Mutex
	pending map[string]*Op // proc/id → op
	ops     []*Op
}

func newBuilder() *builder { return &builder{pending: map[string]*Op{}} }

func (b *builder) add(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := e.Proc + "/" + itoa(e.ID)
	if e.Ev == "invoke" {
		op := &Op{Proc: e.Proc, Mode: e.Mode, F: e.F, Key: e.Key, In: e.Value, Fence: e.Fence, Invoke: e.T, Status: Unknown}
		b.pending[k] = op
		b.ops = append(b.ops, op)
		return
	}
	op := b.pending[k]
	if op == nil {
		return
	}
	delete(b.pending, k)
	op.Status, op.Out, op.Err, op.Complete = Status(e.Ev), e.Value, e.Err, e.T
	if e.Fence != 0 {
		op.Fence = e.Fence
	}
}

// history returns the operations; those still pending stay Unknown with
// no completion time.
func (b *builder) history() *History {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := &History{Ops: make([]Op, 0, len(b.ops))}
	for _, op := range b.ops {
		o := *op
		if o.Status == Unknown && o.Err == "" {
			o.Err = "no-reply"
		}
		h.Ops = append(h.Ops, o)
	}
	sort.SliceStable(h.Ops, func(i, j int) bool { return h.Ops[i].Invoke < h.Ops[j].Invoke })
	return h
}

// Recorder writes a worker's events.
type Recorder struct {
	proc string
	next *atomic.Int64 // shared with the worker's other recorders
	sink func(Event)
}

func newRecorder(proc string, sink func(Event)) *Recorder {
	return &Recorder{proc: proc, next: new(atomic.Int64), sink: sink}
}

// sub returns a recorder for a client of its own within the same worker
// (its operations run concurrently with this recorder's): its name is
// this one's with suffix, which starts with "/", and it numbers its
// operations in the same sequence, so that every operation of the worker
// has an ID of its own.
func (r *Recorder) sub(suffix string) *Recorder {
	return &Recorder{proc: r.proc + suffix, next: r.next, sink: r.sink}
}

// jsonSink writes one JSON object per line; each line is one write, so
// lines of a killed worker are whole.
func jsonSink(w io.Writer) func(Event) {
	var mu sync.Mutex
	return func(e Event) {
		b, _ := json.Marshal(e)
		b = append(b, '\n')
		mu.Lock()
		w.Write(b)
		mu.Unlock()
	}
}

// Pending is an invoked operation awaiting its completion.
type Pending struct {
	r  *Recorder
	id int64
}

// Invoke records the invocation of f on key with input in.
func (r *Recorder) Invoke(mode, f, key, in string, fence uint64) *Pending {
	id := r.next.Add(1)
	r.sink(Event{Ev: "invoke", ID: id, Proc: r.proc, Mode: mode, F: f, Key: key, Value: in, Fence: fence, T: time.Now().UnixNano()})
	return &Pending{r: r, id: id}
}

// OK records a completion that took effect, with its output.
func (p *Pending) OK(out string, fence uint64) {
	p.r.sink(Event{Ev: string(OK), ID: p.id, Proc: p.r.proc, Value: out, Fence: fence, T: time.Now().UnixNano()})
}

// End records a completion by its error: nil is OK with out, a definite
// refusal is Fail, anything that may have applied is Unknown.
func (p *Pending) End(out string, fence uint64, err error) {
	if err == nil {
		p.OK(out, fence)
		return
	}
	kind, definite := Classify(err)
	st := Unknown
	if definite {
		st = Fail
	}
	p.r.sink(Event{Ev: string(st), ID: p.id, Proc: p.r.proc, Value: out, Err: kind, T: time.Now().UnixNano()})
}

// Classify names the kind of err and reports whether it is a definite
// refusal (nothing was applied) rather than an unknown outcome.
func Classify(err error) (kind string, definite bool) {
	var limited *ratelimit.LimitedError
	switch {
	case err == nil:
		return "", true
	case errors.Is(err, fence.ErrStale):
		return "stale", true
	case errors.Is(err, lease.ErrNotHeld):
		return "not-held", true
	case errors.Is(err, lease.ErrHeld):
		return "held", true
	case errors.Is(err, idempotency.ErrInProgress):
		return "in-progress", true
	case errors.Is(err, idempotency.ErrMismatch):
		return "mismatch", true
	case errors.Is(err, idempotency.ErrOutcomeUnknown):
		return "outcome-unknown", false
	case errors.Is(err, idempotency.ErrClaimLost):
		return "claim-lost", false
	case errors.Is(err, session.ErrNotFound):
		return "not-found", true
	case errors.Is(err, session.ErrConflict):
		return "conflict", true
	case errors.Is(err, schedule.ErrCompleted):
		return "completed", true
	case errors.As(err, &limited):
		return "limited", true
	case errors.Is(err, ratelimit.ErrPermitLost):
		return "permit-lost", true
	case errors.Is(err, errReconciled):
		return "reconciled", true
	case errors.Is(err, errDropped):
		return "reply-dropped", false
	case errors.Is(err, lease.ErrUnavailable):
		return "unavailable", false
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout", false
	case errors.Is(err, context.Canceled):
		return "canceled", false
	}
	return "error", false
}

// errDropped marks a reply the worker threw away to act out a lost reply.
var errDropped = errors.New("proof: reply dropped")

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
