// Package pgstore keeps tenure's state (leases and fence guards,
// idempotency records, rate limits, sessions, schedules) in PostgreSQL,
// through a pgx v5 pool or through database/sql with any driver (pgx's
// stdlib driver, lib/pq):
//
//	db, err := pgstore.New(pool, nil)    // *pgxpool.Pool; Options.Schema defaults to "tenure"
//	db, err := pgstore.NewDB(sqlDB, nil) // *sql.DB
//	if err := db.Migrate(ctx); err != nil { … }
//	locker, err := lease.New(db.Leases(), nil)
//
// Both forms run the same statements and behave the same. A nil pool or
// database, or a bad Options.Schema, is an error wrapping
// tenure.ErrInvalid; neither constructor touches the database.
//
// # One transactional entry point
//
// Everything that runs in the caller's transaction comes from one call:
// [Store.Tx] binds the store to a *sql.Tx and returns a txn.Tx, the same
// interface sqlitestore's Tx returns, with the guards (Admit,
// AdmitAtLeast, CheckHolder), CompleteSlot and the idempotency record
// (Idempotency, for idempotency.Keeper.DoTx). Business code written
// against txn.Store runs unchanged on an SQLite file in development and
// tests and on PostgreSQL in production. The *sql.Tx may come from any
// database/sql driver and from helpers that hand one out (sqlx, GORM); it
// need not be on the Store's own pool or *sql.DB, only on the same
// database. [Store.PgxTx] binds a pgx.Tx instead, and
// [Store.QueueCompleteSlot] queues a completion on a pgx.Batch. None of
// them commits or rolls back the caller's transaction; after an error the
// caller rolls it back.
//
// # Tables and migrations
//
// The tables live in the schema (default "tenure") at a numbered version
// recorded in <schema>.tenure_migrations. The versions are the files under
// migrations/ (NNNN_name.up.sql, with {{schema}} for the quoted schema
// name), embedded in the package: [Store.Migrate] applies the pending ones
// in order, in one transaction under an advisory lock (safe from several
// processes at once), and keeps the rows; tables created before versions
// were recorded are adopted as version 1. [Migrations] returns the files
// resolved for a schema, for goose, golang-migrate, atlas or psql (`tenure
// migrate sql --schema NAME` prints them). The lease tables:
//
//	leases(key text PRIMARY KEY, token text, fence bigint NOT NULL, expires_at timestamptz, holder text, waiters boolean)
//	lease_waiters(key text, waiter text, seq bigint, stay_until timestamptz, PRIMARY KEY (key, waiter),
//		token text, holder text, grant_until timestamptz, attempt bigint, listener integer) -- hand-over (migration 8)
//	lease_fence_floor(id boolean PRIMARY KEY, fence bigint NOT NULL) -- one row
//	fences(resource text PRIMARY KEY, fence bigint NOT NULL)
//
// [Open] and [OpenDB] check that the schema is at [SchemaVersion] or up to
// [SchemaWindow] versions above it (migrations are expand-first, so the
// instances of the version before keep running while a rolling upgrade
// migrates) and fail otherwise with an error wrapping [ErrSchemaVersion]
// that names both versions; [New] and [NewDB] do not touch the database
// ([Store.Check] checks later). No request path migrates. Every version
// has a down file (NNNN_name.down.sql): [Store.MigrateDown] runs them for
// a rollback and refuses, unless forced, to drop what a guarantee rests
// on (fences, ledger rows, revocations). Migrate records the checksum
// (SHA-256 of its up file's statements) of each version it applies; [Store.MigrationStatus]
// reports in Drift the versions applied from another text of their file.
// See docs/operations.md.
//
// # Retention
//
// [Store.Sweep] deletes, a bounded number of rows per call, lease rows
// whose lease ended (released or expired) at least the fence retention
// ago (default 0: at once) and whose key no live waiter is queued for,
// waiters' places whose stay ended, expired idempotency records, sessions,
// rate limit state and permits, and old final schedule records;
// [Store.StartSweeper] runs it in the background. So the lease tables hold
// a row per key that is held or waited for, or ended since the last sweep,
// not one per key ever locked; Inspect and List report a swept key free
// with fence 0, and List lists only keys that have a row.
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
//   - Release sets token and holder to NULL and expires_at to the clock
//     WHERE the token matches and has not expired. The row and its fence
//     stay until Sweep drops them; expires_at records when the lease
//     ended.
//
// TTLs are stored with PostgreSQL's microsecond resolution; a TTL is
// rounded up to a whole microsecond.
//
// # Fences, also after data loss
//
// A new tenure's fence is greatest(last fence + 1, fence floor + 1,
// clock_timestamp() in microseconds since the Unix epoch)
// ([github.com/tenurekit/tenure/lease/driver.NextFence], with the floor),
// where the last fence is the key's row's (if it has one) and the fence
// floor is the one row of lease_fence_floor, read in the grant's own
// statement; the same token re-acquiring within its validity keeps its
// fence. Fences therefore increase strictly per key across holders,
// releases, expiries, sweeps and server restarts (the tables are durable),
// and even if the leases table is lost, truncated or restored from an old
// backup, the next fence is above every fence granted before, provided the
// database server's clock did not go back by more than the counter ran
// ahead of it.
//
// The fence floor is what lets Sweep drop the row of an ended lease: a
// row is deleted only once the committed floor is at least its fence.
// Sweep raises the floor to the greatest fence of the rows it is about to
// drop (GREATEST(floor, fence), in a transaction of its own that commits
// first; concurrent sweepers leave the greater value), then deletes them
// in a second statement that re-checks each is still ended with a fence
// at most the floor and skips rows locked by another transaction (a
// CheckHolder or schedule completion in a caller's transaction is never
// blocked). Grants and releases never write the floor, so grants of
// different keys never wait for each other; the floor is one row whatever
// the number of keys. A grant statement reads the floor with its snapshot,
// at its start: one that started before a sweep's raise committed and
// reached its key after the sweep's delete (it waited for the delete, or
// stalled across the sweep's round trip between its two statements) would
// see neither the row nor the raised floor. Schema version 7 closes that
// window: a trigger on the leases table (lease_fence_above_floor) reads
// the floor again, with a fresh snapshot, once a grant's new row is in, and
// fails the statement with serialization_failure when the row's fence is
// not above it; the Store then grants again in a new statement, which
// reads the raised floor. A grant that takes over an existing row follows
// that row's fence and is not checked, nor is a row inserted without a
// token (one restored or written by hand).
//
// # An UNLOGGED leases table
//
// With Options.UnloggedLeases, [Store.Migrate] makes the leases table
// UNLOGGED (ALTER TABLE ... SET UNLOGGED; without the option it sets it
// LOGGED again). Lease writes then skip the write-ahead log: on a server
// that flushes its log at commit (fsync and synchronous_commit on), a lease
// cycle no longer waits for two flushes. PostgreSQL empties an UNLOGGED
// table when it recovers from a crash (not after a clean shutdown) and
// does not replicate it: after a crash or a failover every lease is free,
// and a holder from before learns it on its next Renew (lease.ErrNotHeld).
// Fences still never go back (see above: the next fence is above the
// clock, and the fence floor stays logged), and the guards refuse the old
// holder: the fences table (Admit) stays logged, and CheckHolder and schedule completions look for
// the holder's row, which is gone. [Store.Check] and [Open] refuse a
// leases table whose persistence differs from the Options (an error
// wrapping [ErrLeasesPersistence]); [Store.LeasesUnlogged] reports it.
//
// # Guards in the caller's transaction
//
// A lease coordinates; the resource has the last word. Where the protected
// rows live in the same database, check the fence in the same transaction
// as the write, through [Store.Tx]:
//
//   - Admit (strict: a fence greater than every one admitted for the
//     resource before) and AdmitAtLeast (an equal fence is admitted
//     too) are one upsert on the fences table. A refused fence returns a
//     *fence.StaleError (fence.ErrStale); roll the transaction back and the
//     late writer's rows never land.
//   - A max-fence guard is blind to time: if holder A expired and holder B
//     has not written yet, A's fence is still the greatest and is admitted.
//     CheckHolder closes that window: it locks the lease row
//     (SELECT ... FOR UPDATE) and checks token, fence and expires_at >
//     clock_timestamp(), failing with lease.ErrNotHeld. While the
//     transaction is open nobody can acquire the key, so the transaction's
//     writes are ordered before the next tenure.
//
// # Errors
//
// Bad keys, tokens, TTLs, resource names and fences wrap the primitive's
// ErrInvalid (lease.ErrInvalid for leases and guards), bad options and
// schema names tenure.ErrInvalid (every ErrInvalid is of that kind), and
// nothing is written. Connection failures, timeouts and
// context cancellation while a request is in flight wrap
// lease.ErrUnavailable: the outcome of a write is unknown, and the lease
// operations are idempotent per token so that they can be retried. Other
// errors reported by PostgreSQL (a missing table before Migrate, missing
// privileges) are returned as plain errors with context.
//
// # Connections
//
// On a pgx pool (and on pgx's stdlib driver) the Store uses the default
// query mode: pgx prepares each statement once per connection and caches
// it. Behind a connection pooler in transaction mode (PgBouncer), use a
// pooler with prepared statement support or set DefaultQueryExecMode to
// pgx.QueryExecModeExec. Through database/sql, durations are sent as whole
// microseconds and arrays as text, so every driver sends the statements
// alike.
//
// A call whose reply is lost ends with its context on pgx (the connection
// is closed, and the error wraps lease.ErrUnavailable). lib/pq asks the
// server to cancel the statement when the context ends but keeps waiting
// for the reply, so with lib/pq a call on a connection that stopped
// answering can outlast its context until the operating system gives up on
// the TCP connection; prefer pgx's stdlib driver where that matters.
package pgstore
