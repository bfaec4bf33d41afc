package idempotency

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// errFinished ends a claim whose fn returned.
var errFinished = errors.New("idempotency: fn returned")

// Claim is the lease an attempt holds on a record while its fn runs: a
// random token, a fence strictly greater than every earlier claim's on the
// same record, and a validity measured on the client's monotonic clock
// from when the claim was sent, minus a margin, so it ends before the store
// lets another attempt take the claim over.
//
// Pass Fence to the guard where fn's write lands (fence.Admit and the
// stores' guards): a stalled attempt's late write with an older fence is
// refused there, as its late result is refused by the record.
type Claim struct {
	id    ID
	token Token
	fence uint64
	ttl   time.Duration
	tx    bool

	mu    sync.Mutex
	until time.Time
	timer *time.Timer
	done  chan struct{}
	err   error
}

func newClaim(id ID, token Token, fence uint64, ttl time.Duration, sent time.Time, margin time.Duration) *Claim {
	c := &Claim{id: id, token: token, fence: fence, ttl: ttl, done: make(chan struct{})}
	c.mu.Lock()
	c.until = sent.Add(ttl - margin)
	c.timer = time.AfterFunc(time.Until(c.until), c.checkValidity)
	c.mu.Unlock()
	return c
}

// NewTxClaim returns the claim of the transactional form: it lasts as long
// as the caller's transaction, which holds the record's row, so it has no
// validity of its own and Done never closes.
func NewTxClaim(id ID, token Token, fence uint64) *Claim {
	return &Claim{id: id, token: token, fence: fence, tx: true}
}

// ID returns the record the claim is on.
func (c *Claim) ID() ID { return c.id }

// Fence returns the claim's fencing token.
func (c *Claim) Fence() uint64 { return c.fence }

// Token returns the claim's secret token as text, for a Store call. Never
// log it.
func (c *Claim) Token() string { return c.token.Reveal() }

// ValidUntil returns the end of the client's validity (zero for a
// transactional claim). It carries a monotonic clock reading.
func (c *Claim) ValidUntil() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.until
}

// Done returns a channel closed when the claim is lost or its validity
// runs out (nil, never closed, for a transactional claim).
func (c *Claim) Done() <-chan struct{} { return c.done }

// Err returns nil while the claim is valid, and afterwards an error
// wrapping ErrClaimLost (lost or validity ran out) or saying that fn
// returned.
func (c *Claim) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Claim) extend(until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || until.Before(c.until) {
		return
	}
	c.until = until
	c.timer.Reset(time.Until(until))
}

func (c *Claim) checkValidity() {
	c.mu.Lock()
	if wait := time.Until(c.until); wait > 0 && c.err == nil {
		c.timer.Reset(wait)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.end(fmt.Errorf("%w: the claim's validity ran out", ErrClaimLost))
}

func (c *Claim) end(err error) {
	if c.tx {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		c.timer.Stop()
		close(c.done)
	}
}

// String describes the claim without its token.
func (c *Claim) String() string {
	return fmt.Sprintf("idempotency.Claim{scope=%q key=%q fence=%d token=REDACTED}", c.id.Scope, c.id.Key, c.fence)
}

// Format makes every fmt verb print the redacted form.
func (c *Claim) Format(f fmt.State, _ rune) { fmt.Fprint(f, c.String()) }

// GoString describes the claim without its token, for %#v.
func (c *Claim) GoString() string { return c.String() }

// MarshalText describes the claim without its token, so that encoding/json
// and other text encoders never write it.
func (c *Claim) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// LogValue describes the claim to log/slog without its token.
func (c *Claim) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("scope", c.id.Scope),
		slog.String("key", c.id.Key),
		slog.Uint64("fence", c.fence),
	)
}
