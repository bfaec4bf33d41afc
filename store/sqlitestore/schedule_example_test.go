package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// A job settles every 20ms; its business change and the slot's completion
// commit in one transaction, so each slot settles once whatever happens
// between the commit and the scheduler's own bookkeeping.
func ExampleStore_Tx_completeSlot() {
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
	if _, err := db.DB().ExecContext(ctx, `CREATE TABLE settlements (slot TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}

	s, err := schedule.New(db.Schedules(), &schedule.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runs := 0
	err = s.Add(schedule.Job{
		Name:     "settle",
		Schedule: schedule.Every(20 * time.Millisecond),
		Run: func(ctx context.Context, slot *schedule.Slot) error {
			tx, err := db.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO settlements (slot) VALUES (?)`, slot.ID); err != nil {
				return err
			}
			// Refused (and rolled back) for a duplicate or a stale claim.
			if err := db.Tx(tx).CompleteSlot(ctx, slot); err != nil {
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			if runs++; runs == 2 {
				stop()
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	s.Run(runCtx)

	var n int
	db.DB().QueryRowContext(ctx, `SELECT count(*) FROM settlements`).Scan(&n)
	recs, _ := s.Slots(ctx, "settle", time.Unix(0, 0), time.Now().Add(time.Hour), 0)
	done := 0
	for _, r := range recs {
		if r.State == schedule.Done {
			done++
		}
	}
	// A slot that came due while the scheduler stopped may have run too:
	// whatever ran, each done slot settled exactly once.
	fmt.Println("each done slot settled once:", n == done && n >= 2)
	// Output: each done slot settled once: true
}
