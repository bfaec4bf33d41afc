package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/storetest"
	"github.com/tenurekit/tenure/txn"
)

// newDB is the one place the conformance tests build a Store on a
// database/sql handle.
func newDB(db *sql.DB, o *pgstore.Options) *pgstore.Store { return must(pgstore.NewDB(db, o)) }

// newPool is the one place the conformance tests build a Store on a pgx
// pool.
func newPool(pool *pgxpool.Pool, o *pgstore.Options) *pgstore.Store {
	return must(pgstore.New(pool, o))
}

// TestConformance runs every suite on Stores made by New on pgx pools: the
// store under test behind a real TCP proxy (the faults). The lease suite
// restarts the server, so it runs on a private one; the others run on the
// shared server. The schedule suite runs on a faked server clock (every
// case) and on the server's own.
func TestConformance(t *testing.T) {
	priv := testenv.Postgres(t)
	srv := testenv.SharedPostgres(t)
	rateDSN := srv.NewDatabase(t)
	rateDirect := pgxPool(t, rateDSN)
	rateSQL := openSQL(t, driverPgx, rateDSN, nil) // inspection
	sessDSN := srv.NewDatabase(t)
	sessDirect := pgxPool(t, sessDSN)
	sessDB := newPool(sessDirect, nil)
	if _, err := sessDirect.Exec(ctxT(t), businessTable); err != nil {
		t.Fatal(err)
	}
	if err := sessDB.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	storetest.Run(t, storetest.Factory{
		// Runs the lease suite with the Store (on a pgx pool) behind a
		// real TCP proxy, its guard in *sql.Tx transactions of pgx's
		// stdlib driver.
		// The suite restarts the server, which a shared server must not
		// be, so it runs on a private one with a fresh database per
		// subtest.
		Lease: pgLeases(priv, nil),
		// Runs the idempotency suite with the Store behind a TCP proxy
		// (the faults), a direct pool for inspection and the
		// transactional cases, and a pool of its own for every extra
		// client; a fresh database per subtest on the shared server.
		Idempotency: func(t *testing.T) idempotencytest.Target {
			dsn := srv.NewDatabase(t)
			direct := pgxPool(t, dsn)
			db := newPool(direct, nil)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			proxy := testenv.NewProxy(t, srv.Addr())
			viaPool := poolVia(t, dsn, proxy.Addr(), db, true)
			prepareIdem(t, viaPool, db)
			return idempotencytest.Target{
				Store:  newPool(viaPool, nil).Idempotency(),
				Direct: db.Idempotency(),
				NewClient: func(t *testing.T) idempotency.Store {
					cfg, err := pgxpool.ParseConfig(dsn)
					if err != nil {
						t.Fatal(err)
					}
					cfg.MaxConns = 1
					pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(pool.Close)
					return newPool(pool, nil).Idempotency()
				},
				Faults:   proxy,
				Tx:       idemTxTarget(t, direct, db),
				Retained: pgIdemRetained(db, openSQL(t, driverPgx, dsn, nil)),
			}
		},
		// Runs the rate limit suite on the shared server: one database, a
		// schema of its own per case, the store behind a TCP proxy.
		RateLimit: func(t *testing.T, _ *storetest.Clock) ratelimittest.Target {
			rateSchemaSeq++
			schema := fmt.Sprintf("rl_%d", rateSchemaSeq)
			o := &pgstore.Options{Schema: schema}
			db := newPool(rateDirect, o)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			proxy := testenv.NewProxy(t, srv.Addr())
			pool := poolVia(t, rateDSN, proxy.Addr(), db, true)
			s := newPool(pool, o)
			warmRate(t, pool, s)
			return ratelimittest.Target{
				Store:    s.Limits(),
				Faults:   proxy,
				Keys:     rateKeys(rateSQL, schema),
				Poison:   ratePoison(rateSQL, schema),
				Retained: rateRetained(db, rateSQL),
			}
		},
		// Runs the session suite on the shared server, one database for
		// the whole suite (each case uses users of its own), with the
		// Store behind a TCP proxy per case.
		Session: func(t *testing.T, _ *storetest.Clock) sessiontest.Target {
			proxy := testenv.NewProxy(t, srv.Addr())
			pool := poolVia(t, sessDSN, proxy.Addr(), sessDB, false)
			st := newPool(pool, nil)
			return sessiontest.Target{
				Store:  st.Sessions(),
				Direct: sessDB.Sessions(),
				Faults: proxy,
				Commit: pgxCommitter{st, pool, sessDirect},
				Unit:   200 * time.Millisecond,
				Present: func(t *testing.T, id session.ID) bool {
					var n int
					if err := sessDirect.QueryRow(ctxT(t), `SELECT count(*) FROM tenure.sessions WHERE id = $1`, string(id)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n > 0
				},
				Dump: func(t *testing.T) string { return dumpSessions(t, sessDirect) },
				Retained: &sessiontest.Retained{
					Reclaim: func(t *testing.T) { sweepAll(t, sessDB, retention.Options{}) },
					UserState: func(t *testing.T, user string) bool {
						var n int
						if err := sessDirect.QueryRow(ctxT(t), `SELECT count(*) FROM tenure.session_users WHERE user_id = $1`, user).Scan(&n); err != nil {
							t.Fatal(err)
						}
						return n > 0
					},
				},
			}
		},
		// Runs the schedule suite on the shared server, a fresh database
		// per case, other nodes with pools of their own: on a faked
		// server clock (every case) and on the server's own clock.
		Schedule: pgSchedules(nil),
		Clocks:   storetest.Clocks{Schedule: storetest.BothClocks},
	})
}

// pgLeases is the lease suite's factory on pgx pools with options o.
func pgLeases(priv *testenv.PostgresServer, o *pgstore.Options) func(t *testing.T) leasetest.Target {
	return func(t *testing.T) leasetest.Target {
		dsn := priv.NewDatabase(t)
		direct := pgxPool(t, dsn)
		db := newPool(direct, o)
		if err := db.Migrate(ctxT(t)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		proxy := testenv.NewProxy(t, priv.Addr())
		return leasetest.Target{
			Store:  newPool(poolVia(t, dsn, proxy.Addr(), db, true), o).Leases(),
			Direct: db.Leases(),
			Faults: proxy,
			Restart: func(t *testing.T) lease.Store {
				priv.Restart(t)
				return newPool(poolVia(t, dsn, proxy.Addr(), db, false), o).Leases()
			},
			// Lost data: the store on a new, empty database.
			Forget: func(t *testing.T) lease.Store {
				fresh := newPool(pgxPool(t, priv.NewDatabase(t)), o)
				if err := fresh.Migrate(ctxT(t)); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				return fresh.Leases()
			},
			Resource:    newSQLResource(t, openSQL(t, driverPgx, dsn, nil), db),
			Ended:       pgEnded(db, openSQL(t, driverPgx, dsn, nil)),
			EndWatchers: endListeners(openSQL(t, driverPgx, dsn, nil)),
		}
	}
}

// endListeners ends the listening connections of the stores on direct's
// database (their backends, found by the advisory lock each holds), as
// the end of their process would, and waits until the server has seen
// them end.
func endListeners(direct *sql.DB) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		ctx := ctxT(t)
		pids := column(t, direct, `SELECT pid::text FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = `+pgstore.ListenLockClass+` AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if len(pids) == 0 {
			t.Fatal("no listening connection to end")
		}
		for _, pid := range pids {
			if _, err := direct.ExecContext(ctx, `SELECT pg_terminate_backend($1::int)`, pid); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			var n int
			if err := direct.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid::text = ANY($1)`, pids).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the listening connections %v have not ended", pids)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// pgEnded reaches the lease rows and waiters' places db keeps, through
// direct (a connection to the same database): Reclaim sweeps until the
// sweep has come round, Keys lists the keys of both tables, Raise sets a
// held row's fence, and Stall stops a grant statement between its read and
// its insert (stallGrants).
func pgEnded(db *pgstore.Store, direct *sql.DB) *leasetest.Ended {
	schema := pgx.Identifier{db.Schema()}.Sanitize()
	return &leasetest.Ended{
		Reclaim: func(t *testing.T) { sweepAll(t, db, retention.Options{}) },
		Keys: func(t *testing.T, prefix string) []string {
			return column(t, direct, `SELECT key FROM `+schema+`.leases WHERE left(key, length($1)) = $1
				UNION SELECT key FROM `+schema+`.lease_waiters WHERE left(key, length($1)) = $1`, prefix)
		},
		Raise: func(t *testing.T, key string, f uint64) {
			res, err := direct.ExecContext(ctxT(t), `UPDATE `+schema+`.leases SET fence = $2
				WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp()`, key, int64(f))
			if err != nil {
				t.Fatal(err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				t.Fatalf("Raise(%q): %d rows, %v; want the held row", key, n, err)
			}
		},
		Stall: func(t *testing.T, key string) (func() bool, func()) { return stallGrants(t, direct, schema, key) },
	}
}

// stallSeq numbers the stalls of a test binary (the second key of their
// advisory locks).
var stallSeq atomic.Int32

// stallGrants stops the grants of key in schema between their read and
// their write: a BEFORE INSERT trigger of the test's own, which fires once
// the grant's statement has read the fence floor (with its snapshot, at
// its start) and before it looks for the key's row, waits for an advisory
// lock that a connection of direct holds until resume. stalled reports a
// grant waiting for that lock. The trigger goes when the test ends.
func stallGrants(t *testing.T, direct *sql.DB, schema, key string) (stalled func() bool, resume func()) {
	t.Helper()
	ctx := ctxT(t)
	n := stallSeq.Add(1)
	const class = 7707 // the advisory locks' first key, which tenure does not use
	conn, err := direct.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, $2)`, class, n); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("leasetest_stall_%d", n)
	lit := "'" + strings.ReplaceAll(key, "'", "''") + "'"
	for _, q := range []string{
		`CREATE FUNCTION ` + schema + `.` + name + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN PERFORM pg_advisory_xact_lock_shared(` + strconv.Itoa(class) + `, ` + strconv.Itoa(int(n)) + `); RETURN NEW; END $fn$`,
		`CREATE TRIGGER ` + name + ` BEFORE INSERT ON ` + schema + `.leases FOR EACH ROW WHEN (NEW.key = ` + lit + `) EXECUTE FUNCTION ` + schema + `.` + name + `()`,
	} {
		if _, err := direct.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, $2)`, class, n); err != nil {
				t.Error(err)
			}
			conn.Close()
		})
	}
	t.Cleanup(func() {
		resume()
		if _, err := direct.ExecContext(context.Background(), `DROP TRIGGER IF EXISTS `+name+` ON `+schema+`.leases; DROP FUNCTION IF EXISTS `+schema+`.`+name+`()`); err != nil {
			t.Error(err)
		}
	})
	stalled = func() bool {
		var waiting bool
		err := direct.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 AND objsubid = 2)`, class, n).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	}
	return stalled, resume
}

// column returns the first column of every row query returns on direct,
// as text, sorted.
func column(t *testing.T, direct *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := direct.QueryContext(ctxT(t), query, args...)
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
	slices.Sort(out)
	return out
}

// pgIdemRetained reaches the idempotency rows db keeps, through direct (a
// connection to the same database): Reclaim sweeps, Records reads the
// table.
func pgIdemRetained(db *pgstore.Store, direct *sql.DB) *idempotencytest.Retained {
	schema := pgx.Identifier{db.Schema()}.Sanitize()
	return &idempotencytest.Retained{
		Reclaim: func(t *testing.T) { sweepAll(t, db, retention.Options{}) },
		Records: func(t *testing.T, scope string) []string {
			return column(t, direct, `SELECT key FROM `+schema+`.idempotency WHERE scope = $1`, scope)
		},
	}
}

// pgSchedules is the schedule suite's factory on pgx pools with options o.
func pgSchedules(o *pgstore.Options) func(t *testing.T, clock *storetest.Clock) scheduletest.Target {
	return func(t *testing.T, clock *storetest.Clock) scheduletest.Target {
		srv := testenv.SharedPostgres(t)
		dsn := srv.NewDatabase(t)
		if clock != nil {
			dsn = fakeServerClock(t, srv, dsn, clock)
		}
		pool := pgxPool(t, dsn)
		db := newPool(pool, o)
		if err := db.Migrate(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctxT(t), `CREATE TABLE counters (job text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return scheduletest.Target{
			Store: db.Schedules(),
			Node:  func(t *testing.T) schedule.Store { return newPool(pgxPool(t, dsn), o).Schedules() },
			Complete: func(ctx context.Context, slot *schedule.Slot) error {
				return schedCompleteCounted(ctx, pool, db, slot)
			},
			Count: func(ctx context.Context, job string) (int64, error) {
				var n int64
				err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE job = $1`, job).Scan(&n)
				if errors.Is(err, pgx.ErrNoRows) {
					return 0, nil
				}
				return n, err
			},
			Retained: schedRetained(db, openSQL(t, driverPgx, dsn, nil)),
		}
	}
}

// schedRetained reaches the slot records, ledger rows and attempt
// histories db keeps, through direct: Reclaim sweeps with the schedule
// retention asked for, Stored lists each table's slot IDs of a job.
func schedRetained(db *pgstore.Store, direct *sql.DB) *scheduletest.Retained {
	schema := pgx.Identifier{db.Schema()}.Sanitize()
	return &scheduletest.Retained{
		Reclaim: func(t *testing.T, r time.Duration) { sweepAll(t, db, retention.Options{ScheduleRetention: r}) },
		Stored: func(t *testing.T, job string) scheduletest.Stored {
			ids := func(table string) []string {
				return column(t, direct, `SELECT slot_id FROM `+schema+`.`+table+` WHERE job = $1`, job)
			}
			return scheduletest.Stored{Slots: ids("schedule_slots"), Ledger: ids("schedule_ledger"), Attempts: ids("schedule_attempts")}
		},
	}
}

// TestConformanceUnlogged runs the suites that use the leases table (leases,
// and the schedule's claims) with an UNLOGGED leases table
// (Options.UnloggedLeases).
func TestConformanceUnlogged(t *testing.T) {
	o := &pgstore.Options{UnloggedLeases: true}
	storetest.Run(t, storetest.Factory{
		Lease:    pgLeases(testenv.Postgres(t), o),
		Schedule: pgSchedules(o),
		Clocks:   storetest.Clocks{Schedule: storetest.BothClocks},
	})
}

// TestConformanceSQLDB runs every suite on Stores made by NewDB on
// database/sql (pgx's stdlib driver unless said otherwise), as
// TestConformance does on pgx pools.
func TestConformanceSQLDB(t *testing.T) {
	priv := testenv.Postgres(t)
	srv := testenv.SharedPostgres(t)
	rateDSN := srv.NewDatabase(t)
	rateDirect := openSQL(t, driverPgx, rateDSN, nil)
	rateSQL := rateDirect
	seq := 0
	sessDSN := srv.NewDatabase(t)
	sessDirect := openSQL(t, driverPgx, sessDSN, nil)
	sessDB := newDB(sessDirect, nil)
	if _, err := sessDirect.ExecContext(ctxT(t), businessTable); err != nil {
		t.Fatal(err)
	}
	if err := sessDB.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	storetest.Run(t, storetest.Factory{
		// Runs the lease suite on a Store made by NewDB on pgx's stdlib
		// driver, behind a TCP proxy, the guard in *sql.Tx transactions
		// of the same driver. Like the pgx form, on a private
		// server.
		Lease: func(t *testing.T) leasetest.Target {
			dsn := priv.NewDatabase(t)
			direct := openSQL(t, driverPgx, dsn, nil)
			db := newDB(direct, nil)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			proxy := testenv.NewProxy(t, priv.Addr())
			proxied := via(dsn, priv.Addr(), proxy.Addr())
			return leasetest.Target{
				Store:  newDB(openSQL(t, driverPgx, proxied, db), nil).Leases(),
				Direct: db.Leases(),
				Faults: proxy,
				Restart: func(t *testing.T) lease.Store {
					priv.Restart(t)
					return newDB(openSQL(t, driverPgx, proxied, nil), nil).Leases()
				},
				Forget: func(t *testing.T) lease.Store {
					fresh := newDB(openSQL(t, driverPgx, priv.NewDatabase(t), nil), nil)
					if err := fresh.Migrate(ctxT(t)); err != nil {
						t.Fatalf("Migrate: %v", err)
					}
					return fresh.Leases()
				},
				Resource:    newSQLResource(t, direct, db),
				Ended:       pgEnded(db, direct),
				EndWatchers: endListeners(direct),
			}
		},
		// Runs the idempotency suite on a Store made by NewDB on pgx's
		// stdlib driver; its transactional cases run in *sql.Tx
		// transactions of the same driver.
		Idempotency: func(t *testing.T) idempotencytest.Target {
			dsn := srv.NewDatabase(t)
			direct := openSQL(t, driverPgx, dsn, nil)
			db := newDB(direct, nil)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			proxy := testenv.NewProxy(t, srv.Addr())
			return idempotencytest.Target{
				Store:  newDB(openSQL(t, driverPgx, via(dsn, srv.Addr(), proxy.Addr()), db), nil).Idempotency(),
				Direct: db.Idempotency(),
				NewClient: func(t *testing.T) idempotency.Store {
					c := openSQL(t, driverPgx, dsn, nil)
					c.SetMaxOpenConns(1)
					return newDB(c, nil).Idempotency()
				},
				Faults:   proxy,
				Tx:       idemSQLTxTarget(t, openSQL(t, driverPgx, dsn, nil), db),
				Retained: pgIdemRetained(db, direct),
			}
		},
		// Runs the rate limit suite on a Store made by NewDB on pgx's
		// stdlib driver: one database, a schema per case.
		RateLimit: func(t *testing.T, _ *storetest.Clock) ratelimittest.Target {
			seq++
			schema := fmt.Sprintf("rl_%d", seq)
			o := &pgstore.Options{Schema: schema}
			db := newDB(rateDirect, o)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			proxy := testenv.NewProxy(t, srv.Addr())
			s := newDB(openSQL(t, driverPgx, via(rateDSN, srv.Addr(), proxy.Addr()), db), o)
			return ratelimittest.Target{
				Store:    s.Limits(),
				Faults:   proxy,
				Keys:     rateKeys(rateSQL, schema),
				Poison:   ratePoison(rateSQL, schema),
				Retained: rateRetained(db, rateSQL),
			}
		},
		// Runs the session suite on a Store made by NewDB on pgx's stdlib
		// driver, behind a TCP proxy per case.
		Session: func(t *testing.T, _ *storetest.Clock) sessiontest.Target {
			proxy := testenv.NewProxy(t, srv.Addr())
			db := openSQL(t, driverPgx, via(sessDSN, srv.Addr(), proxy.Addr()), nil)
			st := newDB(db, nil)
			return sessiontest.Target{
				Store:  st.Sessions(),
				Direct: sessDB.Sessions(),
				Faults: proxy,
				Commit: sessiontest.SQLCommitter{DB: db, Direct: sessDirect, Bind: st.Tx, Upsert: businessUpsert, Select: businessSelect},
				Unit:   200 * time.Millisecond,
				Present: func(t *testing.T, id session.ID) bool {
					var n int
					if err := sessDirect.QueryRowContext(ctxT(t), `SELECT count(*) FROM tenure.sessions WHERE id = $1`, string(id)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n > 0
				},
				Retained: &sessiontest.Retained{
					Reclaim: func(t *testing.T) { sweepAll(t, sessDB, retention.Options{}) },
					UserState: func(t *testing.T, user string) bool {
						var n int
						if err := sessDirect.QueryRowContext(ctxT(t), `SELECT count(*) FROM tenure.session_users WHERE user_id = $1`, user).Scan(&n); err != nil {
							t.Fatal(err)
						}
						return n > 0
					},
				},
			}
		},
		// Runs the TxMiddleware cases on a Store made by NewDB on
		// database/sql (pgx's stdlib driver): the business rows and the
		// record commit in one transaction.
		TxMiddleware: func(t *testing.T) idempotencytest.SQLTarget {
			sqlDB, db := freshSQL(t, driverPgx)
			if _, err := sqlDB.ExecContext(ctxT(t), `CREATE TABLE idem_business (id bigserial PRIMARY KEY, name text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return idempotencytest.SQLTarget{
				DB:     sqlDB,
				Bind:   txn.Idempotency(db),
				Direct: db.Idempotency(),
				Add: func(ctx context.Context, tx *sql.Tx, name string) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO idem_business (name) VALUES ($1)`, name)
					return err
				},
				Count: func(ctx context.Context, name string) (int, error) {
					var n int
					err := sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM idem_business WHERE name = $1`, name).Scan(&n)
					return n, err
				},
			}
		},
		// Runs the schedule suite on Stores made by NewDB on pgx's stdlib
		// driver, completing slots with CompleteSlot in *sql.Tx
		// transactions; on a faked server clock and on the server's own.
		// (The integration module runs the *sql.Tx entry points on
		// lib/pq.)
		Schedule: func(t *testing.T, clock *storetest.Clock) scheduletest.Target {
			srv := testenv.SharedPostgres(t)
			dsn := srv.NewDatabase(t)
			if clock != nil {
				dsn = fakeServerClock(t, srv, dsn, clock)
			}
			sqlDB := openSQL(t, driverPgx, dsn, nil)
			db := newDB(sqlDB, nil)
			if err := db.Migrate(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := sqlDB.ExecContext(ctxT(t), `CREATE TABLE counters (job text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return scheduletest.Target{
				Store: db.Schedules(),
				Node: func(t *testing.T) schedule.Store {
					return newDB(openSQL(t, driverPgx, dsn, nil), nil).Schedules()
				},
				Complete: func(ctx context.Context, slot *schedule.Slot) error {
					return inSQLTx(ctx, sqlDB, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, `INSERT INTO counters (job, n) VALUES ($1, 1)
							ON CONFLICT (job) DO UPDATE SET n = counters.n + 1`, slot.Job); err != nil {
							return err
						}
						return db.Tx(tx).CompleteSlot(ctx, slot)
					})
				},
				Count: func(ctx context.Context, job string) (int64, error) {
					var n int64
					err := sqlDB.QueryRowContext(ctx, `SELECT n FROM counters WHERE job = $1`, job).Scan(&n)
					if errors.Is(err, sql.ErrNoRows) {
						return 0, nil
					}
					return n, err
				},
				Retained: schedRetained(db, sqlDB),
			}
		},
		Clocks: storetest.Clocks{Schedule: storetest.BothClocks},
	})
}

// rateKeys lists the rate-limit keys of schema with their time left, on
// the server's clock, for the suite's expiry checks.
func rateKeys(direct *sql.DB, schema string) func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
	return func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
		rows, err := direct.QueryContext(ctx, `WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
			SELECT key, expires_us - c.now FROM `+schema+`.ratelimits, c WHERE expires_us > c.now
			UNION ALL SELECT key, expires_us - c.now FROM `+schema+`.ratelimit_permits, c WHERE expires_us > c.now`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var ks []ratelimittest.KeyTTL
		for rows.Next() {
			var k string
			var left int64
			if err := rows.Scan(&k, &left); err != nil {
				return nil, err
			}
			ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: time.Duration(left) * time.Microsecond})
		}
		return ks, rows.Err()
	}
}

// rateRetained reaches the rate limit rows and permits db keeps (in its
// schema), through direct: Reclaim sweeps, Stored lists every row,
// expired or not.
func rateRetained(db *pgstore.Store, direct *sql.DB) *ratelimittest.Retained {
	schema := pgx.Identifier{db.Schema()}.Sanitize()
	return &ratelimittest.Retained{
		Reclaim: func(t *testing.T) { sweepAll(t, db, retention.Options{}) },
		Stored: func(t *testing.T) []string {
			return column(t, direct, `SELECT key FROM `+schema+`.ratelimits UNION ALL SELECT key FROM `+schema+`.ratelimit_permits`)
		},
	}
}

// ratePoison stores a state the store cannot read under key, in schema.
func ratePoison(direct *sql.DB, schema string) func(ctx context.Context, key driver.StateKey) error {
	return func(ctx context.Context, key driver.StateKey) error {
		_, err := direct.ExecContext(ctx, `INSERT INTO `+schema+`.ratelimits (key, alg, a, b, c, expires_us)
			VALUES ($1, 9, 0, 0, 0, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 60000000)`, key.String())
		return err
	}
}

// The business table of the session suite's sensitive commits.
const (
	businessTable = `CREATE TABLE business_values (
	user_id text NOT NULL, name text NOT NULL, value text NOT NULL, PRIMARY KEY (user_id, name))`
	businessUpsert = `INSERT INTO business_values (user_id, name, value) VALUES ($1, $2, $3)
	ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value`
	businessSelect = `SELECT value FROM business_values WHERE user_id = $1 AND name = $2`
)

// pgxCommitter is sessiontest.SQLCommitter on a pgx pool and PgxTx.
type pgxCommitter struct {
	s      *pgstore.Store
	pool   *pgxpool.Pool
	direct *pgxpool.Pool
}

func (c pgxCommitter) Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: begin: %w", session.ErrUnavailable, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := c.s.PgxTx(tx).CheckSession(ctx, id, version); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, businessUpsert, userID, name, value); err != nil {
		return fmt.Errorf("%w: upsert: %w", session.ErrUnavailable, err)
	}
	if hold != nil {
		hold()
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%w: commit: %w", session.ErrUnavailable, err)
	}
	return nil
}

func (c pgxCommitter) Read(ctx context.Context, userID, name string) (string, bool, error) {
	var v string
	err := c.direct.QueryRow(ctx, businessSelect, userID, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}
