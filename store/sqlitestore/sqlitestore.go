package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/tenurekit/tenure"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/lease"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DefaultTablePrefix is the prefix of the store's tables when
// Options.TablePrefix is empty.
const DefaultTablePrefix = "tenure_"

// maxPrefixLen bounds Options.TablePrefix.
const maxPrefixLen = 48

// DSNParams are the connection parameters Open adds to the file name (see
// [DSN]). A database given to [New] should be opened with the same ones: a
// busy timeout, so that writers wait for each other instead of failing with
// SQLITE_BUSY; WAL, so that readers do not block the writer; and
// _txlock=immediate, so that every transaction from BeginTx takes SQLite's
// write lock at BEGIN and cannot fail with SQLITE_BUSY halfway through.
const DSNParams = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"

// DSN returns the modernc.org/sqlite data source name Open uses for the
// database file at path: a file: URI (the characters %, ? and # of the path
// escaped) followed by [DSNParams]. Use it to open the *sql.DB you pass to
// [New]:
//
//	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
func DSN(path string) string {
	p := filepath.ToSlash(filepath.Clean(path))
	p = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(p)
	return "file:" + p + "?" + DSNParams
}

// Options configure a Store. Nil, and the zero value of each field, mean
// the defaults. [Open] and [New] refuse a value out of its bounds with an
// error wrapping tenure.ErrInvalid, before they touch the database.
type Options struct {
	// TablePrefix is prepended to the names of the store's tables
	// (<prefix>leases, <prefix>fences). It must be an SQL identifier: a
	// letter or underscore, then letters, digits or underscores, at most 48
	// bytes, not starting with "sqlite_". Default (empty) "tenure_"
	// (DefaultTablePrefix).
	TablePrefix string
	// Clock is the store's clock: expiry is judged and fences are floored on
	// it. Default (nil) time.Now. Every process that opens the same file must use
	// the same clock; SQLite files are shared only between processes on one
	// machine, which share its clock.
	Clock func() time.Time
	// Migrate says what the constructor does about the version of the
	// store's tables. Default (MigrateDefault): [Open] applies the pending
	// migrations, [New] only checks that the tables are at SchemaVersion
	// and fails otherwise (set MigrateApply to have New apply them, or
	// apply [Migrations] with your own tool). It must be one of the
	// MigrateMode constants.
	Migrate MigrateMode
}

// Store keeps tenure's state in tables of a SQLite database. It is safe for
// concurrent use, and several Stores (in one process or several) may use the
// same file: SQLite's write lock serialises them.
type Store struct {
	views // per-primitive state; see views.go
	db    *sql.DB
	owned bool // Open opened db; Close closes it
	// closed is set by Close: a write that comes later (a caller's
	// background clean-up, say) fails before it takes a turn, whose lock
	// file it would otherwise create again next to the closed database.
	// A write holds closeMu for reading while it runs, so Close waits
	// for the writes in flight before it closes the database.
	closeMu sync.RWMutex
	closed  bool
	now     func() time.Time
	// lockFirst: BeginTx may start a deferred transaction (a database from
	// New), so a write statement takes the write lock before the clock is
	// read.
	lockFirst bool
	q         queries
	// wq is the write queue of the store's database (queue.go). On a
	// database from Open (queued) every write transaction takes its turn
	// in the driver; on one from New the store's own writes take theirs
	// in writeTx.
	wq     *writeQueue
	wqKey  any // the queues key Close drops; nil for a queue of the store's own
	queued bool

	sweepMu    sync.Mutex
	sweepAfter string        // the lease key the next Sweep scans after
	sweepWhole bool          // the current round of the lease scan began at the first key
	sweepRet   time.Duration // the FenceRetention of the current round
}

// Open opens (creating if needed) the SQLite database file at path with
// [DSN] (WAL, a busy timeout of 5s, synchronous=NORMAL, BEGIN IMMEDIATE
// transactions) and, unless Options.Migrate says otherwise, applies the
// pending migrations (see [Store.Migrate]): the file's tenure tables are
// tenure's own. Tables at a version newer than this code knows are an error
// naming both versions. An empty path or a bad option (see [Options]) is an
// error wrapping tenure.ErrInvalid, and no file is opened. Close closes the
// database.
func Open(ctx context.Context, path string, o *Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: sqlitestore: empty database path", tenure.ErrInvalid)
	}
	if _, _, err := resolve(o); err != nil {
		return nil, err
	}
	key, lockPath := fileKey(path)
	wq := queueFor(key, lockPath)
	db, err := openQueued(DSN(path), wq)
	if err != nil {
		putQueue(key)
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	// Keep the connections concurrent callers use: opening one runs the
	// pragmas again and prepares its statements anew (at 50 concurrent
	// callers, keeping 8 made a lease call cost twice the CPU). Those
	// unused for a minute are closed.
	db.SetMaxIdleConns(64)
	db.SetConnMaxIdleTime(time.Minute)
	s, err := newStore(ctx, db, o, true, wq)
	if err != nil {
		db.Close()
		putQueue(key)
		return nil, err
	}
	s.wqKey, s.queued = key, true
	return s, nil
}

// New returns a Store on the caller's database, which must be a
// modernc.org/sqlite database (driver "sqlite"). By default it does not
// change the database: it checks that the store's tables are at
// SchemaVersion and fails otherwise, with an error wrapping
// [ErrSchemaVersion] that names both versions. Set Options.Migrate to
// MigrateApply to have it apply the pending migrations (as Open does), or
// apply [Migrations] with your own migration tool. Open the database with
// [DSN] (or at least a busy timeout, WAL and _txlock=immediate, see
// [DSNParams]): without a busy timeout concurrent writers fail with
// SQLITE_BUSY, and deferred
// transactions of the caller's own can fail with SQLITE_BUSY halfway. The
// store's own operations are correct on a deferred database too. A nil db
// or a bad option (see [Options]) is an error wrapping tenure.ErrInvalid,
// and the database is not touched. Close does not close db.
func New(ctx context.Context, db *sql.DB, o *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlitestore: nil *sql.DB", tenure.ErrInvalid)
	}
	return newStore(ctx, db, o, false, &writeQueue{})
}

func resolve(o *Options) (prefix string, clock func() time.Time, err error) {
	prefix, clock = DefaultTablePrefix, time.Now
	if o != nil {
		if o.TablePrefix != "" {
			prefix = o.TablePrefix
		}
		if o.Clock != nil {
			clock = o.Clock
		}
		if o.Migrate < MigrateDefault || o.Migrate > MigrateSkip {
			return "", nil, fmt.Errorf("%w: sqlitestore: unknown Options.Migrate %d", tenure.ErrInvalid, o.Migrate)
		}
	}
	if err := validatePrefix(prefix); err != nil {
		return "", nil, err
	}
	return prefix, clock, nil
}

func validatePrefix(p string) error {
	bad := len(p) > maxPrefixLen || strings.HasPrefix(strings.ToLower(p), "sqlite_")
	for i := 0; i < len(p) && !bad; i++ {
		c := p[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("%w: sqlitestore: invalid TablePrefix %q: want a letter or underscore, then letters, digits or underscores, at most %d bytes, not starting with \"sqlite_\"", tenure.ErrInvalid, p, maxPrefixLen)
	}
	return nil
}

func newStore(ctx context.Context, db *sql.DB, o *Options, owned bool, wq *writeQueue) (*Store, error) {
	prefix, clock, err := resolve(o)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, owned: owned, now: clock, lockFirst: !owned, q: buildQueries(prefix), wq: wq}
	var mode MigrateMode
	if o != nil {
		mode = o.Migrate
	}
	if err := s.openMigrate(ctx, mode, owned); err != nil {
		return nil, err
	}
	return s, nil
}

// DB returns the store's database, for the caller's own tables and
// transactions (pass those transactions to Admit, AdmitAtLeast and
// CheckHolder).
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database if Open opened it; a Store from New leaves the
// caller's database open. Calls on a closed store fail with errors wrapping
// lease.ErrUnavailable.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	err := s.db.Close()
	if s.wqKey != nil {
		putQueue(s.wqKey)
		s.wqKey = nil
	}
	return err
}

// writeTx runs fn in a write transaction and commits it; fn's error rolls
// it back and is returned as it is (database errors of fn must already be
// wrapped; fail wraps those of the transaction itself). The writer first
// takes its turn in the database file's write queue (queue.go), in lane l,
// and the store's clock is read only once the transaction holds SQLite's
// write lock, so a request that waited is judged on the time it is
// applied, not the time it was made.
func (s *Store) writeTx(ctx context.Context, l lane, fail func(error) error, fn func(tx *sql.Tx, now int64) error) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return fail(sql.ErrConnDone)
	}
	if !s.queued {
		if err := s.wq.acquire(ctx, l); err != nil {
			return fail(err)
		}
		defer s.wq.release()
	}
	tx, err := s.db.BeginTx(withLane(ctx, l), nil)
	if err != nil {
		return fail(err)
	}
	if s.lockFirst {
		if _, err := tx.ExecContext(ctx, s.q.lock); err != nil {
			tx.Rollback()
			return fail(err)
		}
	}
	if err := fn(tx, s.nowUS()); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// opLane is the queue lane of a store write: the renewal or release of a
// grant goes ahead (see queue.go).
func opLane(op string) lane {
	switch op {
	case "renew", "release", "renew permit", "release permit":
		return laneGrant
	}
	return laneNormal
}

// nowUS returns the store's clock in microseconds since the Unix epoch.
func (s *Store) nowUS() int64 { return s.now().UnixMicro() }

// unavailable wraps a database error of a request: the store could not be
// reached or did not answer, the outcome of a write is unknown.
func unavailable(op, key string, err error) error {
	return fmt.Errorf("%w: sqlitestore: %s %q: %w", lease.ErrUnavailable, op, key, err)
}

type queries struct {
	prefix string
	// lock is a write statement that changes nothing: run first in a
	// transaction, it takes SQLite's write lock (or fails if the
	// transaction's snapshot is already stale), like SELECT ... FOR UPDATE.
	lock string

	acquire, heldTTL, holderOf, renew, release, inspect string
	admit, admitAtLeast, fenceOf, holder                string
	// the queue of waiters (leasedriver.Queuer)
	acquireFirst, firstWaiter, waiting, queue, ahead, dequeue, expired string
}

// grant is the acquire's upsert of a lease row (?1 key, ?2 token, ?3 now
// in µs, ?4 ttl in µs, ?5 holder), up to the WHERE that says who may take
// a conflicting row over: a new tenure gets max(last fence + 1, floor + 1,
// now), the holding token keeps its fence. The floor ($P) is the greatest
// fence of every row Sweep dropped, so a key whose row went still gets a
// fence above every one it had.
const grant = `INSERT INTO $L ("key", token, fence, expires_us, holder)
			VALUES (?1, ?2, max(?3, 1, ` + floorNext + `), ?3 + ?4, nullif(?5, ''))
			ON CONFLICT ("key") DO UPDATE SET
				fence = CASE WHEN $L.token = excluded.token AND $L.expires_us > ?3
					THEN $L.fence ELSE max($L.fence + 1, excluded.fence) END,
				token = excluded.token,
				expires_us = excluded.expires_us,
				holder = excluded.holder`

// floorNext is one more than the fence floor (lease_fence_floor, $P).
const floorNext = `coalesce((SELECT fence + 1 FROM $P WHERE id = 1), 1)`

func buildQueries(prefix string) queries {
	l := `"` + prefix + `leases"`
	f := `"` + prefix + `fences"`
	w := `"` + prefix + `lease_waiters"`
	r := strings.NewReplacer("$L", l, "$F", f, "$W", w, "$P", `"`+prefix+`lease_fence_floor"`)
	return queries{
		prefix: prefix,
		lock:   r.Replace(`UPDATE $L SET fence = fence WHERE 0`),

		// ?1 key, ?2 token, ?3 now (µs), ?4 ttl (µs). A free or expired
		// key, or the holding token, gets the grant; a new tenure gets
		// max(last fence + 1, now), the holding token keeps its fence.
		acquire: r.Replace(grant + `
			WHERE $L.token = excluded.token AND $L.expires_us > ?3
				OR ($L.token IS NULL OR $L.expires_us IS NULL OR $L.expires_us <= ?3)
				AND NOT EXISTS (SELECT 1 FROM $W WHERE "key" = ?1 AND stay_until_us > ?3)
			RETURNING fence`),
		// The grant of acquire for the first live waiter (or anyone, when
		// none waits): the waiters are not asked again.
		acquireFirst: r.Replace(grant + `
			WHERE $L.token IS NULL OR $L.expires_us IS NULL OR $L.expires_us <= ?3
				OR $L.token = excluded.token
			RETURNING fence`),
		// ?1 key, ?2 now: the first live waiter.
		firstWaiter: r.Replace(`SELECT waiter FROM $W WHERE "key" = ?1 AND stay_until_us > ?2 ORDER BY seq LIMIT 1`),
		// ?1 key, ?2 now: how many live waiters are queued.
		waiting: r.Replace(`SELECT count(*) FROM $W WHERE "key" = ?1 AND stay_until_us > ?2`),
		// ?1 key, ?2 waiter, ?3 now, ?4 stay (µs): takes or keeps the
		// waiter's place (a place whose stay ended is taken anew, at the
		// back) and returns its order.
		queue: r.Replace(`INSERT INTO $W ("key", waiter, seq, stay_until_us)
			VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM $W WHERE "key" = ?1), ?3 + ?4)
			ON CONFLICT ("key", waiter) DO UPDATE SET
				seq = CASE WHEN $W.stay_until_us > ?3 THEN $W.seq ELSE excluded.seq END,
				stay_until_us = excluded.stay_until_us
			RETURNING seq`),
		// ?1 key, ?2 waiter, ?3 now, ?4 seq: the live waiters ahead.
		ahead: r.Replace(`SELECT count(*) FROM $W WHERE "key" = ?1 AND waiter <> ?2 AND stay_until_us > ?3 AND seq < ?4`),
		// ?1 key, ?2 waiter: leaves the queue.
		dequeue: r.Replace(`DELETE FROM $W WHERE "key" = ?1 AND waiter = ?2`),
		// ?1 key, ?2 now: drops the key's places whose stay ended.
		expired: r.Replace(`DELETE FROM $W WHERE "key" = ?1 AND stay_until_us <= ?2`),
		heldTTL: r.Replace(`SELECT expires_us - ?2, coalesce(holder, '') FROM $L WHERE "key" = ?1 AND expires_us > ?2`),
		// ?1 key.
		holderOf: r.Replace(`SELECT token, expires_us, coalesce(holder, '') FROM $L WHERE "key" = ?1`),
		// ?1 key, ?2 token, ?3 now, ?4 ttl.
		renew: r.Replace(`UPDATE $L SET expires_us = ?3 + ?4
			WHERE "key" = ?1 AND token = ?2 AND expires_us > ?3
			RETURNING fence`),
		// ?1 key, ?2 token, ?3 now. The fence stays, and the time the
		// lease ended, from which the row's retention counts (Sweep).
		release: r.Replace(`UPDATE $L SET token = NULL, holder = NULL, expires_us = ?3
			WHERE "key" = ?1 AND token = ?2 AND expires_us > ?3`),
		inspect: r.Replace(`SELECT fence, expires_us, token IS NOT NULL, coalesce(holder, '') FROM $L WHERE "key" = ?1`),

		// ?1 resource, ?2 fence.
		admit: r.Replace(`INSERT INTO $F (resource, fence) VALUES (?1, ?2)
			ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence
			WHERE $F.fence < excluded.fence
			RETURNING fence`),
		admitAtLeast: r.Replace(`INSERT INTO $F (resource, fence) VALUES (?1, ?2)
			ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence
			WHERE $F.fence <= excluded.fence
			RETURNING fence`),
		fenceOf: r.Replace(`SELECT fence FROM $F WHERE resource = ?1`),
		// ?1 key, ?2 token, ?3 fence, ?4 now.
		holder: r.Replace(`SELECT 1 FROM $L
			WHERE "key" = ?1 AND token = ?2 AND fence = ?3 AND expires_us > ?4`),
	}
}
