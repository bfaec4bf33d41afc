package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/pgstore"
)

// schedCompleteCounted adds one to job's business counter and completes
// slot in the same transaction.
func schedCompleteCounted(ctx context.Context, pool *pgxpool.Pool, db *pgstore.Store, slot *schedule.Slot) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO counters (job, n) VALUES ($1, 1)
			ON CONFLICT (job) DO UPDATE SET n = counters.n + 1`, slot.Job); err != nil {
			return err
		}
		return db.CompleteSlot(ctx, tx, slot)
	})
}

// TestScheduleConformance runs the suite on the shared server, a fresh
// database per case, on the server's clock; other nodes have pools of
// their own.
func TestScheduleConformance(t *testing.T) {
	scheduletest.Run(t, func(t *testing.T) scheduletest.Target {
		srv := testenv.SharedPostgres(t)
		dsn := srv.NewDatabase(t)
		pool := srv.Pool(t, dsn)
		db := pgstore.New(pool, nil)
		if err := db.Migrate(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctxT(t), `CREATE TABLE counters (job text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return scheduletest.Target{
			Store: db.Schedules(),
			Node:  func(t *testing.T) schedule.Store { return pgstore.New(srv.Pool(t, dsn), nil).Schedules() },
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
		}
	})
}

// QueueCompleteSlot: the business change and the completion in one batch
// (one round trip, one implicit transaction); a refused completion aborts
// the batch, business change included.
func TestQueueCompleteSlot(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE counters (job text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s := schedule.New(db.Schedules(), &schedule.Options{Node: "n", ClaimTTL: time.Minute})
	job := "batch"
	every := schedule.Every(time.Second)
	if err := s.Add(schedule.Job{Name: job, Schedule: every, Run: func(context.Context, *schedule.Slot) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	now, err := db.Schedules().Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := s.Claim(ctx, job, every.Next(now.Add(-time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	send := func() error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO counters (job, n) VALUES ($1, 1) ON CONFLICT (job) DO UPDATE SET n = counters.n + 1`, job)
		if err := db.QueueCompleteSlot(b, slot); err != nil {
			return err
		}
		return pool.SendBatch(ctx, b).Close()
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	if err := send(); !errors.Is(err, schedule.ErrCompleted) {
		t.Fatalf("second batch: %v, want ErrCompleted", err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE job = $1`, job).Scan(&n); err != nil || n != 1 {
		t.Fatalf("counter %d, %v; want 1 (the refused batch rolled back)", n, err)
	}
	if r, err := db.Schedules().Slot(ctx, job, slot.ID); err != nil || r.State != schedule.Done {
		t.Fatalf("record %+v, %v", r, err)
	}
	if err := db.QueueCompleteSlot(nil, slot); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("nil batch: %v", err)
	}
}
