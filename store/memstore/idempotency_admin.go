package memstore

import (
	"context"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"slices"
	"strings"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// The idempotency view implements idempotency.Admin.
var _ idempotency.Admin = idemView{}

// record returns what Inspect reports for the live record r (nil: none).
func (v idemView) record(id idempotency.ID, r *idemRec, now time.Time) idempotency.Record {
	rec := idempotency.Record{ID: id}
	if r == nil {
		return rec
	}
	rec.Exists = true
	rec.Completed = r.done
	rec.Fingerprint = r.fp
	rec.Fence = r.fence
	if !r.done && r.claimUntil.After(now) {
		rec.ClaimTTL = r.claimUntil.Sub(now)
	}
	rec.Expires = r.expires.Sub(now)
	if r.done {
		rec.Outcome = cloneOutcome(r.out)
	}
	return rec
}

// List returns the live records that match f, ordered by scope and key.
func (v idemView) List(ctx context.Context, f idempotency.Filter) ([]idempotency.Record, error) {
	f, err := driver.ValidateFilter(f)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	now := v.s.now()
	var out []idempotency.Record
	for id := range v.st.recs {
		if rec := v.record(id, v.live(id, now), now); f.Match(rec) {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b idempotency.Record) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// settle checks s against the live record under the lock and returns it.
func (v idemView) settle(ctx context.Context, s idempotency.Settle, now time.Time) (*idemRec, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	r := v.live(s.ID, now)
	if err := driver.SettleError(s, v.record(s.ID, r, now)); err != nil {
		return nil, err
	}
	return r, nil
}

// Resolve records out for the record s names, guarded by its fence.
func (v idemView) Resolve(ctx context.Context, s idempotency.Settle, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	now := v.s.now()
	r, err := v.settle(ctx, s, now)
	if err != nil {
		return err
	}
	r.done = true
	r.token = ""
	r.claimUntil = time.Time{}
	r.expires = now.Add(retention)
	out.Message = driver.CleanMessage(out.Message)
	r.out = cloneOutcome(out)
	return nil
}

// ForceRelease drops the claim of the record s names, guarded by its
// fence. The record keeps its fence, so the next claim's is greater.
func (v idemView) ForceRelease(ctx context.Context, s idempotency.Settle) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	r, err := v.settle(ctx, s, v.s.now())
	if err != nil {
		return err
	}
	r.released = true
	r.token = ""
	return nil
}
