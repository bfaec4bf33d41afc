package idempotency

import "database/sql"

// TxBinder binds the idempotency record of a SQL store to one of the
// caller's database/sql transactions, for [Keeper.TxMiddleware]: the record
// of a request commits or rolls back together with the caller's rows. For
// a sqlitestore or pgstore Store s, txn.Idempotency(s) is its binder (the
// same as func(tx *sql.Tx) Tx { return s.Tx(tx).Idempotency() }).
//
// The Tx it returns marks and rolls back to a savepoint of tx but never
// commits or rolls back tx itself; see [Keeper.DoTx] for what the caller
// does with tx after each answer.
type TxBinder func(tx *sql.Tx) Tx
