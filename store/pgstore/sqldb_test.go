package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq" // database/sql driver "postgres"

	"github.com/tenurekit/tenure/examples/sqltx"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/pgstore"
)

// The database/sql drivers the *sql.DB form and the *sql.Tx entry points
// are tested with.
const (
	driverPgx = "pgx"      // github.com/jackc/pgx/v5/stdlib
	driverPQ  = "postgres" // github.com/lib/pq
)

// sqlConns is how many connections a test's *sql.DB keeps open.
const sqlConns = 4

// openSQL opens dsn with driver as a *sql.DB of sqlConns connections,
// closed when the test ends. With warm (a Store whose statements to
// prepare; pgx only), every connection is opened now, before any fault,
// and a request made while a proxy drops replies really reaches the
// server: the connections have the Store's statements prepared (named by
// their SQL, so pgx uses them) and skip the liveness ping before reuse.
//
// lib/pq is used where no fault is injected: a call whose reply is lost
// waits for it past its context's end (lib/pq asks the server to cancel
// the statement but keeps reading), so the fault cases of the suites
// cannot run on it. It sends a statement with its arguments in one round
// trip (binary_parameters).
func openSQL(t *testing.T, driver, dsn string, warm *pgstore.Store) *sql.DB {
	t.Helper()
	var db *sql.DB
	switch driver {
	case driverPQ:
		if warm != nil {
			t.Fatal("openSQL: lib/pq is not for fault cases")
		}
		var err error
		if db, err = sql.Open(driverPQ, dsn+"&binary_parameters=yes"); err != nil {
			t.Fatal(err)
		}
	case driverPgx:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		var opts []stdlib.OptionOpenDB
		if warm != nil {
			stmts := allStatements(warm)
			opts = append(opts,
				stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }),
				stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
					for _, s := range stmts {
						if _, err := c.Prepare(ctx, s, s); err != nil {
							return err
						}
					}
					return nil
				}))
		}
		db = stdlib.OpenDB(*cfg, opts...)
	default:
		t.Fatalf("unknown driver %q", driver)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(sqlConns)
	db.SetMaxIdleConns(sqlConns)
	if warm != nil {
		ctx := ctxT(t)
		var conns []*sql.Conn
		for range sqlConns {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
	}
	return db
}

func allStatements(db *pgstore.Store) []string {
	var out []string
	out = append(out, pgstore.Statements(db)...)
	out = append(out, pgstore.IdempotencyStatements(db)...)
	return append(out, pgstore.RateStatements(db)...)
}

// via returns dsn with the server's address replaced by addr (a proxy).
func via(dsn, server, addr string) string { return strings.Replace(dsn, server, addr, 1) }

// freshSQL returns a *sql.DB on a new database of the shared server,
// opened with driver, and a migrated Store on it made by NewDB.
func freshSQL(t *testing.T, driver string) (*sql.DB, *pgstore.Store) {
	t.Helper()
	srv := testenv.SharedPostgres(t)
	sqlDB := openSQL(t, driver, srv.NewDatabase(t), nil)
	db := newPGDB(t, sqlDB, nil)
	if err := db.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return sqlDB, db
}

// inSQLTx runs fn in a transaction of db, committed when fn returns nil.
func inSQLTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// sqlResource is the business table of the lease suite, written in
// *sql.Tx transactions.
type sqlResource struct {
	db    *sql.DB
	store *pgstore.Store
}

func newSQLResource(t *testing.T, db *sql.DB, store *pgstore.Store) *sqlResource {
	t.Helper()
	if _, err := db.ExecContext(ctxT(t), `CREATE TABLE IF NOT EXISTS items (name text PRIMARY KEY, value text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &sqlResource{db, store}
}

func (r *sqlResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return inSQLTx(ctx, r.db, func(tx *sql.Tx) error {
		if err := r.store.Admit(ctx, tx, name, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, upsertItem, name, v)
		return err
	})
}

func (r *sqlResource) FencedWriteAtLeast(ctx context.Context, name string, f uint64, v string) error {
	return inSQLTx(ctx, r.db, func(tx *sql.Tx) error {
		if err := r.store.AdmitAtLeast(ctx, tx, name, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, upsertItem, name, v)
		return err
	})
}

func (r *sqlResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return inSQLTx(ctx, r.db, func(tx *sql.Tx) error {
		if err := r.store.CheckHolder(ctx, tx, l); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, upsertItem, name, v)
		return err
	})
}

func (r *sqlResource) PlainWrite(ctx context.Context, name, v string) error {
	_, err := r.db.ExecContext(ctx, upsertItem, name, v)
	return err
}

func (r *sqlResource) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM items WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// sqlBiz is the caller's own table, written in the caller's *sql.Tx.
type sqlBiz struct{ tx *sql.Tx }

func (b sqlBiz) Add(ctx context.Context, name string) error {
	_, err := b.tx.ExecContext(ctx, `INSERT INTO idem_business (name) VALUES ($1)`, name)
	return err
}

// idemSQLTxTarget is the transactional idempotency form on *sql.Tx
// transactions of db, for store.
func idemSQLTxTarget(t *testing.T, db *sql.DB, store *pgstore.Store) *idempotencytest.TxTarget {
	t.Helper()
	if _, err := db.ExecContext(ctxT(t), `CREATE TABLE IF NOT EXISTS idem_business (id bigserial PRIMARY KEY, name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &idempotencytest.TxTarget{
		Run: func(ctx context.Context, body func(tx idempotency.Tx, biz idempotencytest.Business) error) error {
			return inSQLTx(ctx, db, func(tx *sql.Tx) error { return body(store.IdempotencyTx(tx), sqlBiz{tx}) })
		},
		Count: func(ctx context.Context, name string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_business WHERE name = $1`, name).Scan(&n)
			return n, err
		},
	}
}

// TestSQLTxEntryPoints runs the *sql.Tx entry points in transactions of
// both drivers, on a Store made by New (a pgx pool) and one made by NewDB:
// business code written against sqltx.Store (CheckHolder and the
// idempotency record in the caller's transaction), Admit and AdmitAtLeast,
// which never end the caller's transaction, and nil transactions.
func TestSQLTxEntryPoints(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	for _, form := range []string{"pool", "sqldb"} {
		for _, driver := range []string{driverPgx, driverPQ} {
			t.Run(form+"/"+driver, func(t *testing.T) {
				ctx := ctxT(t)
				dsn := srv.NewDatabase(t)
				txDB := openSQL(t, driver, dsn, nil)
				var db *pgstore.Store
				if form == "pool" {
					db = newPG(t, srv.Pool(t, dsn), nil)
				} else {
					db = newPGDB(t, openSQL(t, driverPgx, dsn, nil), nil)
				}
				if err := db.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := txDB.ExecContext(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				keeper, err := idempotency.New(db.Idempotency(), nil)
				if err != nil {
					t.Fatal(err)
				}
				locker, err := lease.New(db.Leases(), nil)
				if err != nil {
					t.Fatal(err)
				}
				o := &sqltx.Orders{DB: txDB, Store: db, Keeper: keeper}
				l, err := locker.TryAcquire(ctx, "orders", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range []bool{false, true} {
					id, replayed, err := o.Place(ctx, l, "k1", "book")
					if err != nil || replayed != want || id != "1" {
						t.Fatalf("Place #%d = %q, %v, %v; want order 1, replayed %v", i+1, id, replayed, err, want)
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if _, _, err := o.Place(ctx, l, "k2", "pen"); !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, fence.ErrStale) {
					t.Fatalf("Place after release: %v, want ErrNotHeld and ErrStale", err)
				}
				var n int
				if err := txDB.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%d orders (%v), want 1", n, err)
				}

				// A refused fence leaves the caller's transaction open: the
				// caller decides, and its own earlier write is still there
				// until it rolls back.
				tx, err := txDB.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Admit(ctx, tx, "r", 5); err != nil {
					t.Fatal(err)
				}
				if err := db.AdmitAtLeast(ctx, tx, "r", 5); err != nil {
					t.Fatalf("AdmitAtLeast of the admitted fence: %v", err)
				}
				var stale *fence.StaleError
				if err := db.Admit(ctx, tx, "r", 5); !errors.As(err, &stale) || stale.Current != 5 {
					t.Fatalf("Admit of the admitted fence: %v, want a StaleError with current 5", err)
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES ('late')`); err != nil {
					t.Fatalf("the transaction is not usable after a refusal: %v", err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatalf("Rollback after a refusal: %v (the store ended the transaction)", err)
				}
				if f := storedFenceSQL(t, txDB, "r"); f != 0 {
					t.Fatalf("fence %d stored after the rollback, want none", f)
				}

				if err := db.Admit(ctx, nil, "r", 1); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("Admit(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.AdmitAtLeast(ctx, nil, "r", 1); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("AdmitAtLeast(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.CheckHolder(ctx, nil, l); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("CheckHolder(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.CompleteSlot(ctx, nil, nil); !errors.Is(err, schedule.ErrInvalid) {
					t.Fatalf("CompleteSlot(nil tx): %v, want ErrInvalid", err)
				}
				if _, err := keeper.DoTx(ctx, db.IdempotencyTx(nil), idempotency.Request{Scope: "s", Key: "k"},
					func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, nil }); !errors.Is(err, idempotency.ErrInvalid) {
					t.Fatalf("DoTx on IdempotencyTx(nil): %v, want ErrInvalid", err)
				}
			})
		}
	}
}

func storedFenceSQL(t *testing.T, db *sql.DB, resource string) uint64 {
	t.Helper()
	var f int64
	err := db.QueryRowContext(ctxT(t), `SELECT fence FROM tenure.fences WHERE resource = $1`, resource).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return uint64(f)
}
