package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tenure-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The business table lives in the same file.
	if _, err := db.DB().ExecContext(ctx, `CREATE TABLE ledger (period TEXT PRIMARY KEY, settled INTEGER NOT NULL)`); err != nil {
		panic(err)
	}

	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		panic(err)
	}
	l, err := locker.TryAcquire(ctx, "settle:2026-11", 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)

	// settle admits the fence and writes in one transaction: a stale fence
	// rolls the business change back.
	settle := func(f uint64) error {
		tx, err := db.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := db.Tx(tx).Admit(ctx, "ledger:2026-11", f); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger VALUES ('2026-11', 1)`); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println("settle:", settle(l.Fence()))
	err = settle(l.Fence() - 1) // an older holder waking up late
	fmt.Println("late settle is stale:", errors.Is(err, fence.ErrStale))

	var n int
	if err := db.DB().QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// settle: <nil>
	// late settle is stale: true
	// ledger rows: 1
}

// ExampleNew uses a database the caller opened, with the DSN the store
// needs.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tenure-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	sqlDB, err := sql.Open("sqlite", sqlitestore.DSN(filepath.Join(dir, "app.db")))
	if err != nil {
		panic(err)
	}
	defer sqlDB.Close()
	// New does not change the caller's database unless asked to: here it
	// applies the store's migrations (a service whose tables are managed
	// by its own migration tool applies sqlitestore.Migrations instead).
	db, err := sqlitestore.New(ctx, sqlDB, &sqlitestore.Options{TablePrefix: "locks_", Migrate: sqlitestore.MigrateApply})
	if err != nil {
		panic(err)
	}

	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		panic(err)
	}
	err = locker.Do(ctx, "nightly", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// The strict holder check: token, fence and expiry on the store's
		// clock, with the write lock held until the transaction ends.
		if err := db.Tx(tx).CheckHolder(ctx, l); err != nil {
			return err
		}
		// ... the caller's own writes in tx ...
		return tx.Commit()
	})
	fmt.Println(err)
	// Output: <nil>
}
