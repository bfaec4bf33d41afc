package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurekit/tenure/internal/tenancy"
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
	g     *tenancy.Grant // nil for a transactional claim
}

// newClaim returns the claim of a Begin sent at sent that the store
// granted for ttl; its validity timer starts at once.
func (k *Keeper) newClaim(id ID, token Token, fence uint64, ttl time.Duration, sent time.Time) *Claim {
	c := &Claim{id: id, token: token, fence: fence}
	c.g = tenancy.New(tenancy.Config{
		Token: token.Reveal(), Fence: fence, TTL: ttl, Margin: k.margin(),
		Renew: func(ctx context.Context) (time.Duration, error) {
			return ttl, k.st.Renew(ctx, id, token.Reveal(), fence, ttl)
		},
		Lost: func(err error) error {
			if errors.Is(err, ErrClaimLost) || errors.Is(err, ErrInvalid) {
				return fmt.Errorf("%w: renewal refused: %w", ErrClaimLost, err)
			}
			return nil
		},
		Expired: fmt.Errorf("%w: the claim's validity ran out", ErrClaimLost),
		Log:     []any{"scope", id.Scope, "key", id.Key},
	}, sent, ttl)
	return c
}

// newTxClaim returns the claim of the transactional form: it lasts as long
// as the caller's transaction, which holds the record's row, so it has no
// validity of its own and Done never closes.
func newTxClaim(id ID, token Token, fence uint64) *Claim {
	return &Claim{id: id, token: token, fence: fence}
}

// ID returns the record the claim is on.
func (c *Claim) ID() ID { return c.id }

// Fence returns the claim's fencing token.
func (c *Claim) Fence() uint64 { return c.fence }

// Token returns the claim's secret token (it prints as "REDACTED"); Reveal
// gives the text, for a Store call. Never log that.
func (c *Claim) Token() Token { return c.token }

// ValidUntil returns the end of the client's validity (zero for a
// transactional claim). It carries a monotonic clock reading.
func (c *Claim) ValidUntil() time.Time {
	if c.g == nil {
		return time.Time{}
	}
	return c.g.ValidUntil()
}

// Done returns a channel closed when the claim is lost or its validity
// runs out (nil, never closed, for a transactional claim).
func (c *Claim) Done() <-chan struct{} {
	if c.g == nil {
		return nil
	}
	return c.g.Done()
}

// Err returns nil while the claim is valid, and afterwards an error
// wrapping ErrClaimLost (lost or validity ran out) or saying that fn
// returned.
func (c *Claim) Err() error {
	if c.g == nil {
		return nil
	}
	return c.g.Err()
}

// end ends the claim with err unless it already ended.
func (c *Claim) end(err error) {
	if c.g != nil {
		c.g.End(err)
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
