package idempotency

import (
	"context"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"time"

	"github.com/tenurekit/tenure"
)

// Token is a claim's secret token: tenure.Token, the one secret type of
// every primitive. Every formatting path (fmt verbs at any depth,
// log/slog, encoding/json and other text encoders) prints it as
// "REDACTED"; only Reveal gives the text, for a Store to send or compare.
// The zero Token is empty. Get one from NewToken.
type Token = tenure.Token

// UnknownError reports an outcome that is unknown. errors.Is(err,
// ErrOutcomeUnknown) holds, and Unwrap returns the cause (a store error,
// which may wrap ErrUnavailable), if any.
type UnknownError struct {
	Scope, Key string
	// Fence is the fence of the attempt whose outcome is unknown.
	Fence uint64
	// Ran reports whether this call ran fn (its result could not be
	// recorded); false means an earlier attempt's claim was abandoned.
	Ran bool
	// Err is the cause, if any.
	Err error
}

// Error describes the error.
func (e *UnknownError) Error() string {
	if e.Ran {
		msg := fmt.Sprintf("idempotency: key %q in scope %q: fn ran (fence %d) but its result could not be recorded; the outcome is unknown", e.Key, e.Scope, e.Fence)
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
		return msg
	}
	return fmt.Sprintf("idempotency: key %q in scope %q: an earlier attempt (fence %d) ended without recording a result; its outcome is unknown (reconcile, then use Recover)", e.Key, e.Scope, e.Fence)
}

// Is reports whether target is ErrOutcomeUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the cause.
func (e *UnknownError) Unwrap() error { return e.Err }

// Store is the contract every backend implements. Each call is one atomic
// step judged on the store's own clock (Redis TIME, PostgreSQL
// clock_timestamp(), the process owning a SQLite file or memory store).
// Implementations validate their input with package driver's Validate functions before
// writing, wrap transport failures in ErrUnavailable, and are safe for
// concurrent use.
type Store interface {
	// Begin claims b.ID for b.Token, or answers from the live record:
	//
	//   - no live record (none, released, or retention over): Claimed, with
	//     a fence above every fence granted for the ID before;
	//   - another fingerprint: Mismatch;
	//   - completed: Completed with its outcome;
	//   - claimed by b.Token: Claimed again, same fence, claim renewed (so a
	//     Begin whose reply was lost can be sent again);
	//   - claimed by another token, claim live: InProgress;
	//   - claimed by another token, claim expired: with b.Takeover, Claimed
	//     with a new, greater fence; otherwise Abandoned.
	Begin(ctx context.Context, b driver.Begin) (driver.Begun, error)
	// Renew extends the claim held by token with fence to ttl from now.
	// ErrClaimLost if the claim is not held by token and fence, or expired:
	// an expired claim is never renewed.
	Renew(ctx context.Context, id ID, token string, fence uint64, ttl time.Duration) error
	// Complete records out for the claim held by token with fence, and
	// keeps the record for retention from now. It is accepted while no
	// other attempt took the claim over, also after the claim expired;
	// ErrClaimLost otherwise. Completing again with the same token and
	// fence changes nothing and succeeds (a Complete whose reply was lost
	// can be sent again).
	Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error
	// Release drops the claim held by token (the record no longer exists;
	// the next Begin claims it anew). ErrClaimLost if token holds no claim
	// on id: a completed record is never released.
	Release(ctx context.Context, id ID, token string) error
	// Inspect reports the record of id without changing it.
	Inspect(ctx context.Context, id ID) (Record, error)
}

// Tx is the transactional form of a SQL store, bound to one of the caller's
// transactions (see [Keeper.DoTx]): the record is written in that
// transaction and commits or rolls back with the caller's own rows. SQL
// stores return one from a transaction: s.Tx(tx).Idempotency() (txn.Tx).
type Tx interface {
	// Claim is Begin inside the transaction. A concurrent transaction that
	// has claimed the same ID and not yet ended makes Claim wait until it
	// commits (then Claim answers from its record) or rolls back (then
	// Claim claims). After a Claimed answer the store marks a savepoint, so
	// that Undo can roll back what the caller writes after it.
	Claim(ctx context.Context, b driver.Begin) (driver.Begun, error)
	// Undo rolls the transaction back to the savepoint Claim marked: the
	// claim stays, the caller's writes since are gone.
	Undo(ctx context.Context) error
	// Complete is Store.Complete inside the transaction.
	Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error
	// Release is Store.Release inside the transaction.
	Release(ctx context.Context, id ID, token string) error
}
