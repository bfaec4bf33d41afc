package idempotency

import (
	"context"
	"fmt"
	"time"
)

// ParseRecordState parses the names String returns ("" is AnyState).
// Other input gives an error wrapping ErrInvalid.
func ParseRecordState(s string) (RecordState, error) {
	switch s {
	case "", "any":
		return AnyState, nil
	case "in-progress":
		return StateInProgress, nil
	case "unknown":
		return StateUnknown, nil
	case "done":
		return StateDone, nil
	}
	return 0, fmt.Errorf("%w: unknown record state %q (want in-progress, unknown or done)", ErrInvalid, s)
}

// Admin is the operator's surface of a store: list records and settle the
// ones whose outcome is unknown. memstore, sqlitestore, pgstore and
// redisstore's idempotency views implement it (assert it on the view:
// store.Idempotency().(idempotency.Admin)). Each change is one atomic
// step on the store's clock, guarded by the record's fence.
//
// Both Resolve and ForceRelease refuse, changing nothing:
//
//   - with ErrNotFound when there is no live record of the ID;
//   - with ErrChanged when the record's fence is not s.Fence;
//   - with ErrCompleted when the record already holds a result;
//   - with an *InProgressError (ErrInProgress) while its claim is live,
//     unless s.Force.
//
// After either, the claim's token holds nothing: a stalled executor's late
// renewal, completion or release is refused with ErrClaimLost.
type Admin interface {
	// List returns up to f.Limit live records that match f (fewer if the
	// store holds fewer), with their outcomes. SQL stores order them by
	// scope and key; Redis scans its keys (SCAN over the store's prefix,
	// a bounded number of steps) and sorts what it found.
	List(ctx context.Context, f Filter) ([]Record, error)
	// Resolve records out as the record's result, kept for retention from
	// now: every later request with the same key replays it (with the
	// record's fingerprint; another fingerprint is still refused with
	// ErrMismatch).
	Resolve(ctx context.Context, s Settle, out Outcome, retention time.Duration) error
	// ForceRelease drops the record's claim: the next request with the
	// key claims it anew with a greater fence and runs.
	ForceRelease(ctx context.Context, s Settle) error
}

// admin returns the Keeper's store as an Admin.
func (k *Keeper) admin() (Admin, error) {
	if k == nil || k.s == nil {
		return nil, fmt.Errorf("%w: idempotency: nil Keeper (use New)", ErrInvalid)
	}
	a, ok := k.s.(Admin)
	if !ok {
		return nil, fmt.Errorf("%w: idempotency: the store (%T) does not implement Admin", ErrInvalid, k.s)
	}
	return a, nil
}

// List returns the live records that match f (see [Admin.List]). The
// Keeper's store must implement Admin; otherwise the error wraps
// ErrInvalid.
func (k *Keeper) List(ctx context.Context, f Filter) ([]Record, error) {
	a, err := k.admin()
	if err != nil {
		return nil, err
	}
	return a.List(ctx, f)
}

// Resolve records out as the result of a record whose outcome is unknown
// (see [Admin.Resolve]), kept for Options.Retention: call it after
// reconciling an *UnknownError, with the fence it reported (or the one
// Inspect shows), and every later request with the key replays out. A
// failed outcome (out.Failed) is replayed as a *FinalError. The Keeper's
// store must implement Admin.
func (k *Keeper) Resolve(ctx context.Context, s Settle, out Outcome) error {
	a, err := k.admin()
	if err != nil {
		return err
	}
	return a.Resolve(ctx, s, out, k.o.Retention)
}

// ForceRelease drops the claim of a record whose outcome is unknown (see
// [Admin.ForceRelease]), so that the next request with the key runs: call
// it when reconciliation found that the earlier attempt took no effect.
// The Keeper's store must implement Admin.
func (k *Keeper) ForceRelease(ctx context.Context, s Settle) error {
	a, err := k.admin()
	if err != nil {
		return err
	}
	return a.ForceRelease(ctx, s)
}
