package pgstore_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// Settle a period once across all instances: the lease coordinates, and
// Admit in the same transaction as the business write refuses a late
// holder's stale fence.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	db, err := pgstore.New(pool, nil) // tables in schema "tenure"
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}

	err = locker.Do(ctx, "settle:2026-11", 30*time.Second, func(ctx context.Context, l *lease.Lease) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// The resource has the last word: a stale fence rolls back the
			// whole transaction.
			if err := db.PgxTx(tx).Admit(ctx, "ledger:2026-11", l.Fence()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE ledger SET settled = true WHERE period = '2026-11'`)
			return err
		})
	})
	switch {
	case errors.Is(err, fence.ErrStale):
		log.Print("a newer holder has already written; nothing changed")
	case errors.Is(err, lease.ErrLost):
		log.Print("the lease ended while settling")
	case err != nil:
		log.Fatal(err)
	}
}

// CheckHolder is the strict guard: it also refuses a holder whose lease
// has expired when the next holder has not written yet, and it keeps the
// next holder out until the transaction ends.
func ExampleStore_Tx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db, err := pgstore.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}
	l, err := locker.TryAcquire(ctx, "report:daily", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := db.PgxTx(tx).CheckHolder(ctx, l); err != nil {
			return err // lease.ErrNotHeld: expired, released or taken
		}
		_, err := tx.Exec(ctx, `INSERT INTO reports (day) VALUES (current_date)`)
		return err
	})
	if errors.Is(err, lease.ErrNotHeld) {
		log.Print("no longer the holder; the report was not written")
	}
}
