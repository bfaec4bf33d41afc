// Package txn is the transactional entry point of the SQL stores
// (sqlitestore and pgstore): one call binds a store to the caller's own
// transaction and returns every operation that runs in it.
//
//	t := db.Tx(tx) // db is a *sqlitestore.Store or a *pgstore.Store
//	if err := t.CheckHolder(ctx, l); err != nil {
//		return err // roll tx back: l no longer holds its key
//	}
//	// ... the caller's writes in tx ...
//	return tx.Commit()
//
// The operations:
//
//   - the guards: Admit and AdmitAtLeast (a max-fence guard on a
//     resource's row) and CheckHolder (the lease row locked and checked on
//     the database's clock until the transaction ends);
//   - CheckSession, the session of the request checked at the commit of a
//     sensitive action (a payment, a role change): live and not revoked
//     until the transaction ends, so a logout either waits for the commit
//     or comes first and the commit is refused;
//   - CompleteSlot, for a scheduled job whose effect happens once per slot;
//   - Idempotency, the record of a request for idempotency.Keeper.DoTx.
//
// Business code that depends on [Store] and [Tx] instead of a store runs
// unchanged on SQLite and PostgreSQL. pgstore also binds a pgx.Tx
// (pgstore.Store.PgxTx), returning the same Tx.
package txn
