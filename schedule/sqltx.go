package schedule

import (
	"context"
	"database/sql"
)

// SQLCompleter completes a slot inside the caller's own database/sql
// transaction, for an effect that happens once per slot: the slot's
// business writes and its completion commit or roll back together. The SQL
// stores' *Store (sqlitestore and pgstore) implement it, so a handler
// written against SQLCompleter runs unchanged on SQLite and PostgreSQL.
//
// CompleteSlot checks that slot's claim is still current (else an error
// wrapping ErrStale), records (job, slot) in the store's ledger (a slot
// completed before: ErrCompleted) and marks the slot done, all in tx. It
// never commits or rolls back tx: on an error the caller rolls tx back.
type SQLCompleter interface {
	CompleteSlot(ctx context.Context, tx *sql.Tx, slot *Slot) error
}
