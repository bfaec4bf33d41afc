package idempotency

import "database/sql"

// TxStore is the transactional idempotency surface of the SQL stores
// (sqlitestore and pgstore; both stores' *Store implement it): the record
// of a request is kept in the caller's own database/sql transaction, so it
// commits or rolls back together with the caller's rows. Business code
// that depends on TxStore runs unchanged on SQLite and PostgreSQL:
//
//	res, err := keeper.DoTx(ctx, store.IdempotencyTx(tx), req, fn)
//
// The Tx it returns marks and rolls back to a savepoint of tx but never
// commits or rolls back tx itself; see [Keeper.DoTx] for what the caller
// does with tx after each answer.
type TxStore interface {
	// IdempotencyTx returns the transactional form bound to tx.
	IdempotencyTx(tx *sql.Tx) Tx
}
