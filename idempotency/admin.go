package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Operators settle records whose outcome is unknown through [Admin]. An
// operator holds no claim token, so every change is guarded by the fence
// of the record the operator inspected: a compare-and-set that refuses
// when another attempt claimed the record since.
var (
	// ErrNotFound reports that there is no live record of the ID (never
	// written, released, or past its retention). Nothing was changed.
	ErrNotFound = errors.New("idempotency: no such record")
	// ErrStale reports that the record's fence is not the one given: the
	// record moved on (another attempt claimed it) since it was
	// inspected. Nothing was changed; inspect it again.
	ErrStale = errors.New("idempotency: the record changed since it was inspected (its fence moved)")
	// ErrCompleted reports that the record already holds a result, which
	// an operator does not overwrite or drop. Nothing was changed.
	ErrCompleted = errors.New("idempotency: the record already holds a result")
)

// MaxListLimit bounds Filter.Limit.
const MaxListLimit = 10000

// DefaultListLimit is the Filter.Limit used when it is 0.
const DefaultListLimit = 100

// RecordState is the state of a live record as an operator sees it.
type RecordState int

const (
	// AnyState (the zero value) matches every live record in a Filter.
	AnyState RecordState = iota
	// StateInProgress: claimed, and the claim is live (an executor is
	// running, or was until very recently).
	StateInProgress
	// StateUnknown: claimed, and the claim expired without a recorded
	// result; the outcome is unknown until an operator settles it.
	StateUnknown
	// StateDone: a result (a value or a final error) is recorded.
	StateDone
)

// String returns the state's name: "any", "in-progress", "unknown" or
// "done".
func (s RecordState) String() string {
	switch s {
	case AnyState:
		return "any"
	case StateInProgress:
		return "in-progress"
	case StateUnknown:
		return "unknown"
	case StateDone:
		return "done"
	}
	return fmt.Sprintf("idempotency.RecordState(%d)", int(s))
}

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

// State returns the record's state: StateDone when completed, else
// StateInProgress while its claim is live and StateUnknown after. A record
// that does not exist has AnyState.
func (r Record) State() RecordState {
	switch {
	case !r.Exists:
		return AnyState
	case r.Completed:
		return StateDone
	case r.ClaimTTL > 0:
		return StateInProgress
	}
	return StateUnknown
}

// Filter selects the records Admin.List returns.
type Filter struct {
	// State keeps only records in this state. Default AnyState.
	State RecordState
	// ScopePrefix keeps only records whose scope starts with it (bytes).
	// Default "": every scope.
	ScopePrefix string
	// Limit is the most records returned. Default (0) DefaultListLimit;
	// 1 to MaxListLimit.
	Limit int
}

// ValidateFilter checks a filter and returns it with the default limit
// filled in. Errors wrap ErrInvalid.
func ValidateFilter(f Filter) (Filter, error) {
	if f.State < AnyState || f.State > StateDone {
		return f, fmt.Errorf("%w: unknown record state %d", ErrInvalid, int(f.State))
	}
	if f.Limit == 0 {
		f.Limit = DefaultListLimit
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return f, fmt.Errorf("%w: list limit %d out of range [1, %d]", ErrInvalid, f.Limit, MaxListLimit)
	}
	if len(f.ScopePrefix) > MaxScopeLen {
		return f, fmt.Errorf("%w: scope prefix is %d bytes, longer than %d", ErrInvalid, len(f.ScopePrefix), MaxScopeLen)
	}
	return f, nil
}

// Match reports whether the live record r passes f's state and scope
// prefix (not its limit).
func (f Filter) Match(r Record) bool {
	if !r.Exists || len(r.Scope) < len(f.ScopePrefix) || r.Scope[:len(f.ScopePrefix)] != f.ScopePrefix {
		return false
	}
	return f.State == AnyState || r.State() == f.State
}

// Settle names the record an operator settles: its ID and the fence it had
// when the operator inspected it.
type Settle struct {
	ID
	// Fence is the record's fence as inspected (Record.Fence). The change
	// is refused with ErrStale if the record's fence is another one.
	Fence uint64
	// Force settles the record even while its claim is live: the running
	// executor loses its claim (its renewal and completion are refused
	// with ErrClaimLost). Default false: a live claim is refused with an
	// *InProgressError.
	Force bool
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
//   - with ErrStale when the record's fence is not s.Fence;
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

// ValidateSettle checks a Settle: its ID and a fence in range. Errors wrap
// ErrInvalid.
func ValidateSettle(s Settle) error {
	if err := ValidateID(s.ID); err != nil {
		return err
	}
	return ValidateFence(s.Fence)
}

// SettleError returns the error Admin reports for a record r that cannot
// be settled as s asks, or nil if it can: ErrNotFound, ErrStale,
// ErrCompleted or an *InProgressError (with the claim's remaining time),
// in that order. Stores call it on the record they read in the same
// atomic step as the change.
func SettleError(s Settle, r Record) error {
	switch {
	case !r.Exists:
		return fmt.Errorf("%w: key %q in scope %q", ErrNotFound, s.Key, s.Scope)
	case r.Fence != s.Fence:
		return fmt.Errorf("%w: key %q in scope %q has fence %d, not %d", ErrStale, s.Key, s.Scope, r.Fence, s.Fence)
	case r.Completed:
		return fmt.Errorf("%w: key %q in scope %q", ErrCompleted, s.Key, s.Scope)
	case r.ClaimTTL > 0 && !s.Force:
		return &InProgressError{Scope: s.Scope, Key: s.Key, RetryAfter: r.ClaimTTL}
	}
	return nil
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
