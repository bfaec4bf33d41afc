package txn

import (
	"context"
	"database/sql"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

// Tx is a SQL store's operations bound to one of the caller's
// transactions. Each runs in that transaction, so what it checks or records
// commits or rolls back together with the caller's own rows; none of them
// commits or rolls the transaction back. On an error the caller rolls the
// transaction back, so that its own writes do not land.
//
// A Tx from a nil transaction answers every call with an error wrapping
// tenure.ErrInvalid.
type Tx interface {
	// Admit admits fence for resource if it is greater than every fence
	// admitted for resource before (one write per tenure). A refused fence
	// returns a *fence.StaleError (errors.Is fence.ErrStale) and changes
	// nothing. Resource names follow the rules of lease keys; a bad name
	// or a fence of 0 wraps lease.ErrInvalid.
	//
	// A max-fence guard is blind to time: a holder whose lease expired is
	// still admitted until the next holder has written. CheckHolder closes
	// that window.
	Admit(ctx context.Context, resource string, fence uint64) error
	// AdmitAtLeast is Admit that also admits a fence equal to the greatest
	// admitted one (several writes within one tenure).
	AdmitAtLeast(ctx context.Context, resource string, fence uint64) error
	// CheckHolder checks that l still holds its key (token, fence and
	// expiry on the database's clock) and keeps the lease row locked until
	// the transaction ends, so no other holder takes the key before it
	// commits: the writes it makes after the check are ordered before the
	// next tenure. A holder that lost its key gets an error wrapping
	// lease.ErrNotHeld and fence.ErrStale.
	CheckHolder(ctx context.Context, l *lease.Lease) error
	// CompleteSlot completes slot: it checks that the slot's claim is still
	// current (else an error wrapping schedule.ErrStale and
	// lease.ErrNotHeld), records (job, slot) in the store's ledger (a slot
	// completed before: schedule.ErrCompleted) and marks the slot done. A
	// slot completed in a committed transaction is done whatever its
	// handler returns afterwards, and no node runs it again.
	CompleteSlot(ctx context.Context, slot *schedule.Slot) error
	// CheckSession checks that session id is live (not revoked, not
	// rotated away, within its idle and absolute deadlines on the
	// database's clock) and, when version is not 0, still at version (the
	// version the request loaded: session.Session.Version), and keeps it
	// so until the transaction ends: a revoke, rotation, "revoke user" or
	// save of the session waits for tx to commit or roll back, so the
	// caller's writes after the check commit before the session ends or
	// not at all. A session that ended gets an error wrapping
	// session.ErrNotFound, one at another version session.ErrConflict; a
	// malformed ID wraps session.ErrInvalid, a database error
	// session.ErrUnavailable. It neither refreshes nor changes the session.
	CheckSession(ctx context.Context, id session.ID, version uint64) error
	// Idempotency returns the idempotency record bound to the transaction,
	// for idempotency.Keeper.DoTx: the claim, the caller's rows and the
	// result commit or roll back together.
	Idempotency() idempotency.Tx
}

// Store is a SQL store that binds its operations to a database/sql
// transaction. sqlitestore's and pgstore's *Store implement it, so code
// written against Store runs unchanged on an embedded SQLite file in
// development and tests and on PostgreSQL (any database/sql driver) in
// production.
type Store interface {
	// Tx returns the store's operations bound to tx.
	Tx(tx *sql.Tx) Tx
}

// Idempotency returns the binder idempotency.Keeper.TxMiddleware takes:
// for each request's transaction, s's idempotency record bound to it.
func Idempotency(s Store) idempotency.TxBinder {
	return func(tx *sql.Tx) idempotency.Tx { return s.Tx(tx).Idempotency() }
}
