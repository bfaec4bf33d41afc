package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// driverPgx is the database/sql driver the *sql.DB form and the *sql.Tx
// entry points are tested with here (github.com/jackc/pgx/v5/stdlib); the
// integration tests run them on lib/pq as well.
const driverPgx = "pgx"

// sqlConns is how many connections a test's *sql.DB keeps open.
const sqlConns = 4

// openSQL opens dsn with driver as a *sql.DB of sqlConns connections,
// closed when the test ends. With warm (a Store whose statements to
// prepare; pgx only), every connection is opened now, before any fault,
// and a request made while a proxy drops replies really reaches the
// server: the connections have the Store's statements prepared (named by
// their SQL, so pgx uses them) and skip the liveness ping before reuse.
func openSQL(t *testing.T, driver, dsn string, warm *pgstore.Store) *sql.DB {
	t.Helper()
	var db *sql.DB
	switch driver {
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
		if err := r.store.Tx(tx).Admit(ctx, name, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, upsertItem, name, v)
		return err
	})
}

func (r *sqlResource) FencedWriteAtLeast(ctx context.Context, name string, f uint64, v string) error {
	return inSQLTx(ctx, r.db, func(tx *sql.Tx) error {
		if err := r.store.Tx(tx).AdmitAtLeast(ctx, name, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, upsertItem, name, v)
		return err
	})
}

func (r *sqlResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return inSQLTx(ctx, r.db, func(tx *sql.Tx) error {
		if err := r.store.Tx(tx).CheckHolder(ctx, l); err != nil {
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
			return inSQLTx(ctx, db, func(tx *sql.Tx) error { return body(store.Tx(tx).Idempotency(), sqlBiz{tx}) })
		},
		Count: func(ctx context.Context, name string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_business WHERE name = $1`, name).Scan(&n)
			return n, err
		},
	}
}
