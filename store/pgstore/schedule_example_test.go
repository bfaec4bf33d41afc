package pgstore_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/pgstore"
)

// A monthly settlement whose business change and slot completion commit in
// one transaction (compiled, not run: it needs a server).
func ExampleStore_Tx_completeSlot() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		panic(err)
	}
	db, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	if err := db.Migrate(ctx); err != nil {
		panic(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	monthly, err := schedule.Cron("0 2 1 * *", berlin)
	if err != nil {
		panic(err)
	}
	s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "billing-1"})
	if err != nil {
		panic(err)
	}
	err = s.Add(schedule.Job{
		Name:     "settle-invoices",
		Schedule: monthly,
		Misfire:  schedule.MisfireCatchUp, // every missed month, oldest first
		Retry:    schedule.Retry{Attempts: 3, Backoff: time.Minute},
		Run: func(ctx context.Context, slot *schedule.Slot) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO settlements (period) VALUES ($1)`, slot.ID); err != nil {
					return err
				}
				// schedule.ErrCompleted or schedule.ErrStale: the
				// transaction rolls back with the business change.
				return db.PgxTx(tx).CompleteSlot(ctx, slot)
			})
		},
	})
	if err != nil {
		panic(err)
	}
	s.Run(ctx)
}

// The business change and the completion in one round trip.
func ExampleStore_QueueCompleteSlot() {
	var (
		ctx  context.Context
		pool *pgxpool.Pool
		db   *pgstore.Store
		slot *schedule.Slot // the handler's slot
	)
	b := &pgx.Batch{}
	b.Queue(`UPDATE accounts SET balance = balance + interest WHERE due = $1`, slot.Time)
	if err := db.QueueCompleteSlot(b, slot); err != nil {
		panic(err)
	}
	// One implicit transaction: a refused completion aborts the UPDATE too.
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		panic(err)
	}
}
