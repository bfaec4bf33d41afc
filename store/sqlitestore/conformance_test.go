package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/sqlitestore"
	"github.com/tenurekit/tenure/storetest"
	"github.com/tenurekit/tenure/txn"
)

// newDeferred builds a store through New on a database opened at dsn
// without _txlock=immediate (deferred transactions: the store must take
// the write lock itself before it reads its clock), closed when the test
// ends.
func newDeferred(t *testing.T, dsn string, o *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlitestore.New(t.Context(), db, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func deferredDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
}

// clockOptions returns options with clock as the store's clock (nil: the
// real clock).
func clockOptions(clock *storetest.Clock) *sqlitestore.Options {
	o := &sqlitestore.Options{}
	if clock != nil {
		o.Clock = clock.Now
	}
	return o
}

// TestConformance runs every suite on a file opened with Open. There is no
// network to break, so faults are client-side (storetest.Faults); extra
// clients and nodes open the same file again (their own *sql.DB, as other
// processes would). The lease suite runs again through New on a database
// the caller opened ("NewDeferred").
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		// Restart closes the store and opens the same file again, as a
		// restarted process would.
		Lease: func(t *testing.T) leasetest.Target {
			path := tempPath(t)
			s := open(t, path, nil)
			createBusiness(t, s.DB())
			faults := storetest.NewFaults()
			return leasetest.Target{
				Store:  faults.Leases(s.Leases()),
				Direct: s.Leases(),
				Faults: faults,
				Restart: func(t *testing.T) lease.Store {
					if err := s.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
					return open(t, path, nil).Leases()
				},
				// Lost data: an empty database in a new file.
				Forget:   func(t *testing.T) lease.Store { return open(t, tempPath(t), nil).Leases() },
				Resource: resource{s},
				Unit:     unit,
				Ended:    ended(s, sqlitestore.DefaultTablePrefix),
			}
		},
		// The transactional cases run on the store's database.
		Idempotency: func(t *testing.T) idempotencytest.Target {
			path := tempPath(t)
			s := open(t, path, nil)
			faults := storetest.NewFaults()
			return idempotencytest.Target{
				Store:     faults.Idempotency(s.Idempotency()),
				Direct:    s.Idempotency(),
				NewClient: func(t *testing.T) idempotency.Store { return open(t, path, nil).Idempotency() },
				Faults:    faults,
				Tx:        idemTxTarget(t, s),
				Unit:      unit,
				Retained: &idempotencytest.Retained{
					Reclaim: func(t *testing.T) { sweepAll(t, s) },
					Records: func(t *testing.T, scope string) []string {
						return column(t, s.DB(), `SELECT "key" FROM "`+sqlitestore.DefaultTablePrefix+`idempotency" WHERE scope = ? ORDER BY "key"`, scope)
					},
				},
			}
		},
		// The business rows and the record commit in one transaction.
		TxMiddleware: func(t *testing.T) idempotencytest.SQLTarget {
			s := open(t, tempPath(t), nil)
			tt := idemTxTarget(t, s) // creates the business table
			return idempotencytest.SQLTarget{
				DB:     s.DB(),
				Bind:   txn.Idempotency(s),
				Direct: s.Idempotency(),
				Add: func(ctx context.Context, tx *sql.Tx, name string) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO `+idemBusiness+` (name) VALUES (?)`, name)
					return err
				},
				Count: tt.Count,
				Unit:  unit,
			}
		},
		// On the real clock, the store is built with New on a database the
		// caller opened.
		RateLimit: func(t *testing.T, clock *storetest.Clock) ratelimittest.Target {
			if clock != nil {
				return rateTarget(t, open(t, tempPath(t), clockOptions(clock)), clock)
			}
			s := newDeferred(t, deferredDSN(tempPath(t)), &sqlitestore.Options{Migrate: sqlitestore.MigrateApply})
			tg := rateTarget(t, s, nil)
			tg.NoBubble = "the store's clock is its process's clock: a caller in the same process with a skewed clock skews the store too"
			return tg
		},
		// On the real clock, two stores share one file (two processes'
		// worth of writers).
		Session: func(t *testing.T, clock *storetest.Clock) sessiontest.Target {
			if clock != nil {
				return sessionTarget(t, open(t, tempPath(t), clockOptions(clock)))
			}
			path := tempPath(t)
			a := open(t, path, nil)
			b := open(t, path, nil)
			tg := sessionTarget(t, a)
			tg.Direct = b.Sessions()
			return tg
		},
		Schedule: func(t *testing.T, clock *storetest.Clock) scheduletest.Target {
			path := tempPath(t)
			o := clockOptions(clock)
			s := open(t, path, o)
			if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE counters (job TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return scheduletest.Target{
				Store:    s.Schedules(),
				Node:     func(t *testing.T) schedule.Store { return open(t, path, o).Schedules() },
				Complete: func(ctx context.Context, slot *schedule.Slot) error { return schedCompleteCounted(ctx, s, slot) },
				Count:    func(ctx context.Context, job string) (int64, error) { return schedCounted(ctx, s.DB(), job) },
				Retained: &scheduletest.Retained{
					Reclaim: func(t *testing.T, r time.Duration) { sweepAll(t, s, retention.Options{ScheduleRetention: r}) },
					Stored: func(t *testing.T, job string) scheduletest.Stored {
						return schedStored(t, s.DB(), sqlitestore.DefaultTablePrefix, job)
					},
				},
			}
		},
		Clocks: storetest.Clocks{
			RateLimit: storetest.BothClocks,
			Session:   storetest.BothClocks,
			Schedule:  storetest.BothClocks,
		},
	})
	t.Run("NewDeferred", func(t *testing.T) {
		storetest.Run(t, storetest.Factory{
			Lease: func(t *testing.T) leasetest.Target {
				dsn := deferredDSN(tempPath(t))
				o := &sqlitestore.Options{TablePrefix: "app_", Migrate: sqlitestore.MigrateApply}
				s := newDeferred(t, dsn, o)
				createBusiness(t, s.DB())
				faults := storetest.NewFaults()
				return leasetest.Target{
					Store:  faults.Leases(s.Leases()),
					Direct: s.Leases(),
					Faults: faults,
					Restart: func(t *testing.T) lease.Store {
						if err := s.DB().Close(); err != nil {
							t.Fatalf("Close: %v", err)
						}
						return newDeferred(t, dsn, o).Leases()
					},
					Forget:   func(t *testing.T) lease.Store { return newDeferred(t, deferredDSN(tempPath(t)), o).Leases() },
					Resource: resource{s},
					Unit:     unit,
					Ended:    ended(s, o.TablePrefix),
				}
			},
		})
	})
}

// sweepAll sweeps s (on its clock) with o until nothing is left to sweep.
func sweepAll(t *testing.T, s *sqlitestore.Store, o ...retention.Options) {
	t.Helper()
	var opts retention.Options
	if len(o) > 0 {
		opts = o[0]
	}
	if r, err := retention.SweepAll(t.Context(), s, opts, 0); err != nil || r.More {
		t.Fatalf("Sweep: %+v, %v", r, err)
	}
}

// column returns the first column of every row query returns on db, as
// text.
func column(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ended reaches the lease rows of s (tables prefixed tp): Reclaim sweeps
// until nothing is left, Keys reads the leases and lease_waiters tables.
func ended(s *sqlitestore.Store, tp string) *leasetest.Ended {
	return &leasetest.Ended{
		Reclaim: func(t *testing.T) { sweepAll(t, s) },
		Keys: func(t *testing.T, prefix string) []string {
			return column(t, s.DB(), `SELECT "key" FROM "`+tp+`leases" WHERE substr("key", 1, length(?1)) = ?1
				UNION SELECT "key" FROM "`+tp+`lease_waiters" WHERE substr("key", 1, length(?1)) = ?1 ORDER BY 1`, prefix)
		},
		Raise: func(t *testing.T, key string, f uint64) {
			r, err := s.DB().ExecContext(t.Context(), `UPDATE "`+tp+`leases" SET fence = ?1 WHERE "key" = ?2`, int64(f), key)
			if n, _ := r.RowsAffected(); err != nil || n != 1 {
				t.Fatalf("raise the fence of %q: %d rows, %v", key, n, err)
			}
		},
	}
}

// resource is the suite's fenced value: a business row written in the same
// transaction as Admit. PlainWrite skips Admit (the negative control).
type resource struct{ s *sqlitestore.Store }

func (r resource) write(ctx context.Context, check func(tx *sql.Tx) error, name, v string) error {
	tx, err := r.s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if check != nil {
		if err := check(tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+businessTable+` (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, v); err != nil {
		return err
	}
	return tx.Commit()
}

func (r resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.write(ctx, func(tx *sql.Tx) error { return r.s.Tx(tx).Admit(ctx, name, f) }, name, v)
}

func (r resource) FencedWriteAtLeast(ctx context.Context, name string, f uint64, v string) error {
	return r.write(ctx, func(tx *sql.Tx) error { return r.s.Tx(tx).AdmitAtLeast(ctx, name, f) }, name, v)
}

func (r resource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.write(ctx, func(tx *sql.Tx) error { return r.s.Tx(tx).CheckHolder(ctx, l) }, name, v)
}

func (r resource) PlainWrite(ctx context.Context, name, v string) error {
	return r.write(ctx, nil, name, v)
}

func (r resource) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := r.s.DB().QueryRowContext(ctx, `SELECT value FROM `+businessTable+` WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

const idemBusiness = "idem_business"

// idemBiz is the caller's own table, written in the caller's transaction.
type idemBiz struct{ tx *sql.Tx }

func (b idemBiz) Add(ctx context.Context, name string) error {
	_, err := b.tx.ExecContext(ctx, `INSERT INTO `+idemBusiness+` (name) VALUES (?)`, name)
	return err
}

func idemTxTarget(t *testing.T, s *sqlitestore.Store) *idempotencytest.TxTarget {
	t.Helper()
	if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS `+idemBusiness+
		` (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &idempotencytest.TxTarget{
		Run: func(ctx context.Context, body func(tx idempotency.Tx, biz idempotencytest.Business) error) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := body(s.Tx(tx).Idempotency(), idemBiz{tx}); err != nil {
				return err
			}
			return tx.Commit()
		},
		Count: func(ctx context.Context, name string) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+idemBusiness+` WHERE name = ?`, name).Scan(&n)
			return n, err
		},
	}
}

// rateTarget is the rate-limit suite's target on s, whose clock is clock
// (nil: the real clock).
func rateTarget(t *testing.T, s *sqlitestore.Store, clock *storetest.Clock) ratelimittest.Target {
	faults := storetest.NewFaults()
	now := time.Now
	if clock != nil {
		now = clock.Now
	}
	return ratelimittest.Target{
		Store:  faults.Limits(s.Limits()),
		Faults: faults,
		Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
			m, err := s.RateLimitKeys(ctx)
			var ks []ratelimittest.KeyTTL
			for k, ttl := range m {
				ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: ttl})
			}
			return ks, err
		},
		Poison: func(ctx context.Context, key driver.StateKey) error {
			_, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.RateLimitTable()+` ("key", state, expires_us) VALUES (?1, ?2, ?3)
				ON CONFLICT ("key") DO UPDATE SET state = excluded.state, expires_us = excluded.expires_us`,
				key.String(), []byte("not a state"), now().Add(time.Minute).UnixMicro())
			return err
		},
		Retained: &ratelimittest.Retained{
			Reclaim: func(t *testing.T) { sweepAll(t, s) },
			Stored:  func(t *testing.T) []string { return column(t, s.DB(), `SELECT "key" FROM `+s.RateLimitTable()) },
		},
	}
}

// sessionTarget is the session suite's target on s.
func sessionTarget(t *testing.T, s *sqlitestore.Store) sessiontest.Target {
	faults := storetest.NewFaults()
	return sessiontest.Target{
		Store:  faults.Sessions(s.Sessions()),
		Direct: s.Sessions(),
		Faults: faults,
		Commit: sessionCommitter(t, s, faults.IsCut),
		Present: func(t *testing.T, id session.ID) bool {
			var n int
			if err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM tenure_sessions WHERE id = ?`, string(id)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		},
		Dump:     func(t *testing.T) string { return dumpSessions(t, s) },
		Retained: &sessiontest.Retained{Reclaim: func(t *testing.T) { sweepAll(t, s) }},
	}
}

// sessionCommitter commits a business row in a transaction on s's
// database that checks the session first (Tx's CheckSession).
func sessionCommitter(t *testing.T, s *sqlitestore.Store, cut func() bool) sessiontest.SQLCommitter {
	if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS business_values (
		user_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (user_id, name))`); err != nil {
		t.Fatal(err)
	}
	return sessiontest.SQLCommitter{
		DB:   s.DB(),
		Bind: s.Tx,
		Upsert: `INSERT INTO business_values (user_id, name, value) VALUES (?1, ?2, ?3)
			ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value`,
		Select: `SELECT value FROM business_values WHERE user_id = ?1 AND name = ?2`,
		Cut:    cut,
	}
}

func dumpSessions(t *testing.T, s *sqlitestore.Store) string {
	rows, err := s.DB().QueryContext(t.Context(), `SELECT id, user_id, data, version, created_us, idle_us, absolute_us FROM tenure_sessions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, user, data string
		var v, c, i, a int64
		if err := rows.Scan(&id, &user, &data, &v, &c, &i, &a); err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join([]string{id, user, data}, " ") + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// schedCompleteCounted adds one to job's business counter and completes slot in
// the same transaction.
func schedCompleteCounted(ctx context.Context, s *sqlitestore.Store, slot *schedule.Slot) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO counters (job, n) VALUES (?, 1)
		ON CONFLICT (job) DO UPDATE SET n = n + 1`, slot.Job); err != nil {
		return err
	}
	if err := s.Tx(tx).CompleteSlot(ctx, slot); err != nil {
		return err
	}
	return tx.Commit()
}

// schedStored lists the slot IDs of job in the slot, ledger and attempt
// tables (prefixed tp) of db.
func schedStored(t *testing.T, db *sql.DB, tp, job string) scheduletest.Stored {
	ids := func(table string) []string {
		return column(t, db, `SELECT slot_id FROM "`+tp+table+`" WHERE job = ? ORDER BY slot_id`, job)
	}
	return scheduletest.Stored{Slots: ids("schedule_slots"), Ledger: ids("schedule_ledger"), Attempts: ids("schedule_attempts")}
}

func schedCounted(ctx context.Context, db *sql.DB, job string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT n FROM counters WHERE job = ?`, job).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}
