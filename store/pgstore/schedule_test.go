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
		return db.PgxTx(tx).CompleteSlot(ctx, slot)
	})
}

// fakeServerClock makes clock the server clock of the connections made
// with the DSN it returns. pgstore judges time with unqualified
// clock_timestamp() calls; those connections put a schema with a
// clock_timestamp() of its own, which reads the time clock was last set
// to, ahead of pg_catalog in their search_path. Every statement of the
// store under test (leases, slot records, ledger) then runs on clock.
func fakeServerClock(t *testing.T, srv *testenv.PostgresServer, dsn string, clock *scheduletest.Clock) string {
	pool := pgxPool(t, dsn)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA fakeclock;
CREATE TABLE fakeclock.now (t timestamptz NOT NULL);
INSERT INTO fakeclock.now VALUES ('-infinity');
CREATE FUNCTION fakeclock.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS 'SELECT t FROM fakeclock.now'`); err != nil {
		t.Fatal(err)
	}
	clock.Follow(func(now time.Time) {
		if _, err := pool.Exec(context.Background(), `UPDATE fakeclock.now SET t = $1`, now); err != nil {
			t.Errorf("fake server clock: %v", err)
		}
	})
	faked := dsn + "&search_path=fakeclock,pg_catalog,public"
	// The faked connections really see the clock.
	var got time.Time
	if err := pgxPool(t, faked).QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&got); err != nil || !got.Equal(clock.Now()) {
		t.Fatalf("clock_timestamp() on the faked connection = %v (%v), want %v", got, err, clock.Now())
	}
	return faked
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
	s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "n", ClaimTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
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
