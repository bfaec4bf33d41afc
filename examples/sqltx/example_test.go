package sqltx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/tenurekit/tenure/examples/sqltx"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// run is the part of a program that does not care which store it has.
func run(ctx context.Context, orders *sqltx.Orders, locker *lease.Locker) {
	l, err := locker.TryAcquire(ctx, "orders", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the second call is a retry with the same key
		id, replayed, err := orders.Place(ctx, l, "order-7", "book")
		fmt.Println("order", id, "replayed:", replayed, "error:", err)
	}
	l.Release(ctx)
	_, _, err = orders.Place(ctx, l, "order-8", "pen")
	fmt.Println("after release, not held:", errors.Is(err, lease.ErrNotHeld))
	var n int
	orders.DB.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println("rows:", n)
}

// The same business code on an embedded SQLite file, as in development and
// in unit tests (where the file goes in t.TempDir()).
func Example_sqlite() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tenure-sqltx-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	keeper, err := idempotency.New(db.Idempotency(), nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}
	run(ctx, &sqltx.Orders{DB: db.DB(), Store: db, Keeper: keeper}, locker)
	// Output:
	// order 1 replayed: false error: <nil>
	// order 1 replayed: true error: <nil>
	// after release, not held: true
	// rows: 1
}

// The same business code on PostgreSQL through database/sql (pgx's stdlib
// driver here; lib/pq works the same), as in production. It needs a server
// (DATABASE_URL), so it is not run as a test.
func Example_postgres() {
	ctx := context.Background()
	sqlDB, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer sqlDB.Close()
	db, err := pgstore.NewDB(sqlDB, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := sqlDB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	keeper, err := idempotency.New(db.Idempotency(), nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}
	run(ctx, &sqltx.Orders{DB: sqlDB, Store: db, Keeper: keeper}, locker)
}
