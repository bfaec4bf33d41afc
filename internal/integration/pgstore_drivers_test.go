package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"

	"github.com/tenurekit/tenure/examples/sqltx"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/pgstore"
)

// The database/sql drivers the *sql.Tx entry points are run with.
const (
	driverPgx = "pgx"      // github.com/jackc/pgx/v5/stdlib
	driverPQ  = "postgres" // github.com/lib/pq
)

// openSQL opens dsn with driver, closed when the test ends. lib/pq sends
// a statement with its arguments in one round trip (binary_parameters).
func openSQL(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	if driver == driverPQ {
		dsn += "&binary_parameters=yes"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// must returns a function that returns v, or fails t on err.
func must[V any](t testing.TB) func(V, error) V {
	return func(v V, err error) V {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
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
				ctx := ctx(t, time.Minute)
				dsn := srv.NewDatabase(t)
				txDB := openSQL(t, driver, dsn)
				var db *pgstore.Store
				if form == "pool" {
					db = must[*pgstore.Store](t)(pgstore.New(pgxPool(t, dsn), nil))
				} else {
					db = must[*pgstore.Store](t)(pgstore.NewDB(openSQL(t, driverPgx, dsn), nil))
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
				if err := db.Tx(tx).Admit(ctx, "r", 5); err != nil {
					t.Fatal(err)
				}
				if err := db.Tx(tx).AdmitAtLeast(ctx, "r", 5); err != nil {
					t.Fatalf("AdmitAtLeast of the admitted fence: %v", err)
				}
				var stale *fence.StaleError
				if err := db.Tx(tx).Admit(ctx, "r", 5); !errors.As(err, &stale) || stale.Current != 5 {
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

				if err := db.Tx(nil).Admit(ctx, "r", 1); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("Admit(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.Tx(nil).AdmitAtLeast(ctx, "r", 1); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("AdmitAtLeast(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.Tx(nil).CheckHolder(ctx, l); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("CheckHolder(nil tx): %v, want ErrInvalid", err)
				}
				if err := db.Tx(nil).CompleteSlot(ctx, nil); !errors.Is(err, schedule.ErrInvalid) {
					t.Fatalf("CompleteSlot(nil tx): %v, want ErrInvalid", err)
				}
				if _, err := keeper.DoTx(ctx, db.Tx(nil).Idempotency(), idempotency.Request{Scope: "s", Key: "k"},
					func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, nil }); !errors.Is(err, idempotency.ErrInvalid) {
					t.Fatalf("DoTx on Tx(nil).Idempotency(): %v, want ErrInvalid", err)
				}
			})
		}
	}
}

func storedFenceSQL(t *testing.T, db *sql.DB, resource string) uint64 {
	t.Helper()
	var f int64
	err := db.QueryRowContext(ctx(t, time.Minute), `SELECT fence FROM tenure.fences WHERE resource = $1`, resource).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return uint64(f)
}
