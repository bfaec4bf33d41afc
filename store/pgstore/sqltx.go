package pgstore

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/txn"
)

// The transactional entry point shared with sqlitestore.
var _ txn.Store = (*Store)(nil)

// Tx returns the store's operations bound to the caller's transaction tx
// (txn.Tx), from any PostgreSQL driver for database/sql (pgx's stdlib
// driver, lib/pq) and any database/sql helper (sqlx, GORM's ConnPool);
// [Store.PgxTx] binds a pgx.Tx. Nothing it does commits or rolls back tx.
// On PostgreSQL:
//
//   - Admit and AdmitAtLeast are one statement on <schema>.fences (an
//     upsert that raises the stored fence only when the new one is greater,
//     or equal for AdmitAtLeast); the resource's row stays locked until tx
//     ends, so concurrent admissions of one resource are serialized. A
//     fence above the largest bigint wraps lease.ErrInvalid.
//   - CheckHolder locks the lease row (SELECT ... FOR UPDATE) if it has the
//     lease's token and fence and has not expired on clock_timestamp(), so
//     no other holder can acquire, renew or release the key before tx
//     ends. Keep such transactions short; an acquirer waits for them. In
//     READ COMMITTED (the default) a check that waits for the row re-checks
//     its newest version; in REPEATABLE READ or SERIALIZABLE a lease row
//     changed since the snapshot makes PostgreSQL abort with a
//     serialization failure (a plain error): retry the transaction.
//   - CompleteSlot is one statement: it locks the slot's claim lease row if
//     it is still current, inserts (job, slot, fence) into
//     <schema>.schedule_ledger and marks the slot's record done. While tx
//     is open the claim cannot be taken over. [Store.QueueCompleteSlot]
//     sends the same statement on a pgx.Batch.
//   - CheckSession reads the session's row if it is live on
//     clock_timestamp() and locks it (SELECT ... FOR SHARE) until tx ends:
//     a revoke, rotation, "revoke user" or save of the session waits for
//     tx. Several transactions may check one session at once. Isolation
//     levels behave as for CheckHolder: in READ COMMITTED a check that
//     waits for a revoke in flight then sees the session gone; in
//     REPEATABLE READ or SERIALIZABLE it aborts with a serialization
//     failure: retry the transaction.
//   - Idempotency's Claim inserts the claim row in tx and marks a
//     savepoint (SAVEPOINT tenure_idempotency, in the same round trip on
//     pgx), which Undo rolls back to; a concurrent duplicate's claim waits
//     on the row until tx ends, then replays the committed result, or
//     claims after a rollback. Use READ COMMITTED, under which the waiting
//     duplicate sees the committed row.
func (s *Store) Tx(tx *sql.Tx) txn.Tx { return boundTx{s, sqlTx(tx)} }

// PgxTx is [Store.Tx] on a pgx transaction.
func (s *Store) PgxTx(tx pgx.Tx) txn.Tx { return boundTx{s, pgxTx(tx)} }

// boundTx is the store bound to one of the caller's transactions; q is nil
// for a nil transaction.
type boundTx struct {
	s *Store
	q querier
}

func (t boundTx) Admit(ctx context.Context, resource string, f uint64) error {
	return t.s.admit(ctx, t.q, resource, f, fence.Strict)
}

func (t boundTx) AdmitAtLeast(ctx context.Context, resource string, f uint64) error {
	return t.s.admit(ctx, t.q, resource, f, fence.AtLeast)
}

func (t boundTx) CheckHolder(ctx context.Context, l *lease.Lease) error {
	return t.s.checkHolder(ctx, t.q, l)
}

func (t boundTx) CompleteSlot(ctx context.Context, slot *schedule.Slot) error {
	return t.s.completeSlot(ctx, t.q, slot)
}

func (t boundTx) CheckSession(ctx context.Context, id session.ID, version uint64) error {
	return t.s.checkSession(ctx, t.q, id, version)
}

func (t boundTx) Idempotency() idempotency.Tx {
	return idemTx{idemView{t.s, t.s.idemQueries()}, t.q}
}

// sqlTx returns the querier of a caller's *sql.Tx, nil for a nil tx.
func sqlTx(tx *sql.Tx) querier {
	if tx == nil {
		return nil
	}
	return sqlQ{tx}
}

// pgxTx returns the querier of a caller's pgx.Tx, nil for a nil tx.
func pgxTx(tx pgx.Tx) querier {
	if tx == nil {
		return nil
	}
	return pgxQ{tx}
}
