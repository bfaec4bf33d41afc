// Package pgstore keeps tenure's leases and fence guards in PostgreSQL,
// through pgx v5.
//
//	db := pgstore.New(pool, nil) // *pgxpool.Pool; Options.Schema defaults to "tenure"
//	if err := db.Migrate(ctx); err != nil { … }
//	locker, err := lease.New(db.Leases(), nil)
//
// # Tables
//
// [Store.Migrate] creates, in the schema (default "tenure"):
//
//	leases(key text PRIMARY KEY, token text, fence bigint NOT NULL, expires_at timestamptz)
//	fences(resource text PRIMARY KEY, fence bigint NOT NULL)
//
// It is idempotent and may run concurrently in several processes (it
// takes a transaction-scoped advisory lock).
//
// # Expiry is judged on the database's clock
//
// Every lease operation is one SQL statement, and each reads the server's
// clock_timestamp() once and judges expiry on that reading. now() is never
// used: it is the start of the transaction, not the moment the statement
// runs. The client's clock plays no part in the store's decisions;
// [lease.Locker] uses it only to stop its own work early.
//
//   - Acquire is one INSERT ... ON CONFLICT DO UPDATE ... WHERE the row is
//     free, expired, or held by the same token, RETURNING the fence. Zero
//     rows means another token holds the key; a second statement reads its
//     remaining time for the *lease.HeldError.
//   - Renew is an UPDATE WHERE token matches AND expires_at > the clock:
//     an expired lease is never brought back.
//   - Release sets token and expires_at to NULL WHERE the token matches and
//     has not expired. The row and its fence stay.
//
// TTLs are stored with PostgreSQL's microsecond resolution; a TTL is
// rounded up to a whole microsecond.
//
// # Fences, also after data loss
//
// A new tenure's fence is greatest(last fence + 1, clock_timestamp() in
// microseconds since the Unix epoch) ([lease.NextFence]); the same token
// re-acquiring within its validity keeps its fence. Fences therefore
// increase strictly per key across holders, releases, expiries and server
// restarts (the table is durable), and even if the leases table is lost,
// truncated or restored from an old backup, the next fence is above every
// fence granted before, provided the database server's clock did not go
// back by more than the counter ran ahead of it.
//
// # Guards in the caller's transaction
//
// A lease coordinates; the resource has the last word. Where the protected
// rows live in the same database, check the fence in the same transaction
// as the write:
//
//   - [Store.Admit] (strict: a fence greater than every one admitted for the
//     resource before) and [Store.AdmitAtLeast] (an equal fence is admitted
//     too) are one upsert on the fences table. A refused fence returns a
//     *fence.StaleError (fence.ErrStale); roll the transaction back and the
//     late writer's rows never land.
//   - A max-fence guard is blind to time: if holder A expired and holder B
//     has not written yet, A's fence is still the greatest and is admitted.
//     [Store.CheckHolder] closes that window: it locks the lease row
//     (SELECT ... FOR UPDATE) and checks token, fence and expires_at >
//     clock_timestamp(), failing with lease.ErrNotHeld. While the
//     transaction is open nobody can acquire the key, so the transaction's
//     writes are ordered before the next tenure.
//
// # Errors
//
// Bad keys, tokens, TTLs, resource names, fences and schema names wrap
// lease.ErrInvalid and write nothing. Connection failures, timeouts and
// context cancellation while a request is in flight wrap
// lease.ErrUnavailable: the outcome of a write is unknown, and the lease
// operations are idempotent per token so that they can be retried. Other
// errors reported by PostgreSQL (a missing table before Migrate, missing
// privileges) are returned as plain errors with context.
//
// # Connections
//
// The Store uses the pool's default query mode: pgx prepares each statement
// once per connection and caches it. Behind a connection pooler in
// transaction mode (PgBouncer), use a pooler with prepared statement
// support or set the pool's DefaultQueryExecMode to pgx.QueryExecModeExec.
package pgstore
