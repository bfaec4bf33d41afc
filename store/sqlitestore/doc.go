// Package sqlitestore is tenure's embedded default store: its state lives in
// tables of a SQLite database file (modernc.org/sqlite, no cgo, nothing to
// install), which can also hold the caller's own business tables, so that
// fence admission commits or rolls back together with the business change.
//
//	db, err := sqlitestore.Open(ctx, "app.db", nil)
//	locker, err := lease.New(db.Leases(), nil)
//
// # Opening
//
// [Open] opens the file with [DSN]: WAL (readers do not block the writer),
// a busy timeout of 5s (writers wait for each other instead of failing with
// SQLITE_BUSY), synchronous=NORMAL, and _txlock=immediate (every
// transaction from BeginTx takes the write lock at BEGIN, so it cannot fail
// with SQLITE_BUSY halfway). A Store's own writes queue for the write lock
// in Go, in arrival order and bounded by their context, so that SQLite's
// busy handler (which polls and lets newcomers overtake) arbitrates only
// between processes, other Stores and the caller's own transactions. [New]
// uses the caller's *sql.DB, which should be opened with the same
// parameters.
//
// # Tables and migrations
//
// The tables are at a numbered version recorded in <prefix>migrations (the
// prefix is Options.TablePrefix, "tenure_" by default). The versions are
// the files under migrations/ (NNNN_name.up.sql, with {{prefix}} for the
// prefix), embedded in the package. [Open] applies the pending ones by
// default (the file's tenure tables are tenure's own), in one immediate
// transaction, so several processes opening a file at once apply each once;
// [New] only checks the version unless Options.Migrate is MigrateApply.
// Tables at [SchemaVersion] or up to [SchemaWindow] versions above it are
// accepted (migrations are expand-first, so the instances of the version
// before keep running while a rolling upgrade migrates); tables at another
// version are refused with an error wrapping [ErrSchemaVersion] that names
// both versions; tables created before versions were recorded are adopted
// as version 1, their rows kept. Every version has a down file
// (NNNN_name.down.sql): [Store.MigrateDown] runs them for a rollback and
// refuses, unless forced, to drop what a guarantee rests on (fences,
// ledger rows, idempotency records). Migrate records the checksum
// (SHA-256 of its up file's statements) of each version it applies; [Store.MigrationStatus]
// reports in Drift the versions applied from another text of their file.
// [Migrations] returns the files resolved for a prefix, for other
// migration tools. The lease tables:
//
//	<prefix>leases(key TEXT PRIMARY KEY, token TEXT, fence INTEGER NOT NULL, expires_us INTEGER, holder TEXT)
//	<prefix>lease_fence_floor(id INTEGER PRIMARY KEY CHECK (id = 1), fence INTEGER NOT NULL)
//	<prefix>fences(resource TEXT PRIMARY KEY, fence INTEGER NOT NULL)
//
// # Retention
//
// [Store.Sweep] deletes, a bounded number of rows per call, the rows of
// leases that ended (and that no waiter is queued for), expired
// idempotency records, sessions and rate limit state, and old final
// schedule records; [Store.StartSweeper] runs it in the background. Before
// it deletes lease rows it raises the fence floor (lease_fence_floor, one row) to
// their fences in the same transaction, so what the file keeps for leases
// is one row per held lease plus one, however many keys were ever locked.
// See docs/operations.md.
//
// # Expiry and the store's clock
//
// Expiry is judged on one clock, the store's: Options.Clock (time.Now by
// default) of the process that runs the statement, in microseconds. Several
// processes may share one file (SQLite's locks serialise them), and since a
// SQLite file is shared only between processes on one machine (its locking
// does not work over network file systems), they share that machine's
// clock. Every lease write is one conditional statement (an upsert with
// RETURNING for Acquire, an UPDATE ... WHERE token = ? AND expires_us > now
// for Renew and Release) with now passed as a parameter, run in a
// transaction that holds the write lock before the clock is read: a request
// that waited for the lock is judged on the time it is applied, so a
// renewal that waited past the lease's expiry does not bring it back. Only
// a refused Acquire reads once more, in the same transaction, for the
// holder's remaining time. Renewal sets the expiry to now + ttl; release
// clears token and holder, keeps the fence (Inspect reports the last
// fence) and sets the expiry to now, the time the lease ended.
//
// # Fences, also after data loss
//
// A new tenure gets fence max(last fence + 1, floor + 1, now in
// microseconds) (see lease/driver.NextFence), where the floor is the
// greatest fence of every lease row Sweep deleted; re-acquiring with the
// holding token keeps the fence and renews the expiry. Fences and the floor
// live in the file, so they survive restarts of the process, and a key whose
// row was swept still gets a fence above every one it had, however far the
// clock went back since. If the file is lost or replaced by an older
// backup, fences still start above every fence granted before, because they
// are never below the clock in microseconds, as long as the clock did not go
// back by more than the counter had run ahead of it (which it only does
// when more than one tenure per microsecond was granted on a key).
//
// # The guard
//
// A lock coordinates; it does not protect. The resource has the last word:
// db.Tx(tx).Admit ([Store.Tx]) admits a fence for a named resource inside the caller's own
// transaction, in one statement on <prefix>fences, and refuses a fence that
// is not newer than every fence admitted before with a *fence.StaleError
// (errors.Is fence.ErrStale); the caller then rolls back its transaction,
// business rows included. AdmitAtLeast also accepts the same fence
// again, for several writes in one tenure.
//
// A max-fence guard is blind to time: if holder A's lease expired but the
// next holder B has not written yet, A's fence is still the greatest and is
// admitted. CheckHolder closes that window: in the caller's
// transaction it takes SQLite's write lock and checks that the lease row
// still has the holder's token and fence and has not expired on the store's
// clock; no acquirer can commit until the transaction ends.
//
// # One transactional entry point
//
// Everything that runs in the caller's *sql.Tx comes from one call:
// [Store.Tx] binds the store to the transaction and returns a txn.Tx, the
// same interface pgstore's Tx returns, with the guards (Admit,
// AdmitAtLeast, CheckHolder), CompleteSlot and the idempotency record
// (Idempotency, for idempotency.Keeper.DoTx). Write business code against
// txn.Store: it runs on a SQLite file in development and in unit tests (a
// file in t.TempDir(), no server) and on PostgreSQL in production. None of
// them commits or rolls back the caller's transaction.
//
// # Errors
//
// Bad input returns an error of kind tenure.ErrInvalid (the primitive's
// own ErrInvalid for a call's arguments) and writes nothing.
// Database errors (a closed store, I/O errors, a busy timeout, a cancelled
// context) wrap lease.ErrUnavailable: the outcome of a write is unknown, and
// retrying with the same token reconciles it. Errors never contain a token.
package sqlitestore
