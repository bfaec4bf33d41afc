package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// schedCompleteCounted adds one to job's business counter and completes slot in
// the same transaction.
func schedCompleteCounted(ctx context.Context, s *sqlitestore.Store, slot *schedule.Slot) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO counters (job, n) VALUES (?, 1)
		ON CONFLICT (job) DO UPDATE SET n = n + 1`, slot.Job); err != nil {
		return err
	}
	if err := s.CompleteSlot(ctx, tx, slot); err != nil {
		return err
	}
	return tx.Commit()
}

func schedCounted(ctx context.Context, db *sql.DB, job string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT n FROM counters WHERE job = ?`, job).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// TestScheduleConformance runs the suite on a file: with the store's clock
// faked (every case) and on the real clock. Other nodes open the same file.
func TestScheduleConformance(t *testing.T) {
	target := func(t *testing.T, clock *scheduletest.Clock) scheduletest.Target {
		path := tempPath(t)
		o := &sqlitestore.Options{}
		if clock != nil {
			o.Clock = clock.Now
		}
		s := open(t, path, o)
		if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE counters (job TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return scheduletest.Target{
			Store:    s.Schedules(),
			Node:     func(t *testing.T) schedule.Store { return open(t, path, o).Schedules() },
			Complete: func(ctx context.Context, slot *schedule.Slot) error { return schedCompleteCounted(ctx, s, slot) },
			Count:    func(ctx context.Context, job string) (int64, error) { return schedCounted(ctx, s.DB(), job) },
			Clock:    clock,
		}
	}
	scheduletest.RunClocks(t, target)
}
