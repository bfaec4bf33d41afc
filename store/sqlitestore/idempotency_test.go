package sqlitestore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

const idemBusiness = "idem_business"

// idemBiz is the caller's own table, written in the caller's transaction.
type idemBiz struct{ tx *sql.Tx }

func (b idemBiz) Add(ctx context.Context, name string) error {
	_, err := b.tx.ExecContext(ctx, `INSERT INTO `+idemBusiness+` (name) VALUES (?)`, name)
	return err
}

func idemTxTarget(t *testing.T, s *sqlitestore.Store) *idempotencytest.TxTarget {
	t.Helper()
	if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS `+idemBusiness+
		` (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &idempotencytest.TxTarget{
		Run: func(ctx context.Context, body func(tx idempotency.Tx, biz idempotencytest.Business) error) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := body(s.IdempotencyTx(tx), idemBiz{tx}); err != nil {
				return err
			}
			return tx.Commit()
		},
		Count: func(ctx context.Context, name string) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+idemBusiness+` WHERE name = ?`, name).Scan(&n)
			return n, err
		},
	}
}

// TestIdempotencyConformance runs the idempotency suite on a file opened
// with Open; every extra client opens the same file again (its own
// *sql.DB, as another process would), and the transactional cases run on
// the store's database.
func TestIdempotencyConformance(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target {
		path := tempPath(t)
		s := open(t, path, nil)
		wrapped, faults := idempotencytest.Wrap(s.Idempotency())
		return idempotencytest.Target{
			Store:     wrapped,
			Direct:    s.Idempotency(),
			NewClient: func(t *testing.T) idempotency.Store { return open(t, path, nil).Idempotency() },
			Faults:    faults,
			Tx:        idemTxTarget(t, s),
			Unit:      unit,
		}
	})
}

// TestIdempotencyRetentionOnStoreClock checks that retention is judged on
// the store's clock (Options.Clock) when a record is read, that a key used
// again after it runs as new, and that PurgeIdempotency removes only rows
// past their retention.
func TestIdempotencyRetentionOnStoreClock(t *testing.T) {
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})
	ctx := t.Context()
	k, err := idempotency.New(s.Idempotency(), nil) // default retention 24h
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "user:1 POST /pay", Key: "k1", Fingerprint: "fp"}
	other := idempotency.Request{Scope: "user:1 POST /pay", Key: "k2", Fingerprint: "fp"}
	runs := 0
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) {
		runs++
		return []byte("paid"), nil
	}
	if _, err := k.Do(ctx, req, fn); err != nil {
		t.Fatal(err)
	}
	clk.Add(23 * time.Hour)
	if _, err := k.Do(ctx, other, fn); err != nil {
		t.Fatal(err)
	}
	if r, err := k.Do(ctx, req, fn); err != nil || !r.Replayed {
		t.Fatalf("after 23h: %+v %v, want a replay", r, err)
	}
	clk.Add(time.Hour)
	rec, err := s.Idempotency().Inspect(ctx, req.ID())
	if err != nil || rec.Exists {
		t.Fatalf("after 24h: %+v %v, want the record gone", rec, err)
	}
	if n, err := s.PurgeIdempotency(ctx); err != nil || n != 1 {
		t.Fatalf("PurgeIdempotency = %d, %v; want 1 (k2 is 1h old)", n, err)
	}
	var rows int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM tenure_idempotency`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows left (%v), want k2's", rows, err)
	}
	if r, err := k.Do(ctx, req, fn); err != nil || r.Replayed || runs != 3 {
		t.Fatalf("after retention: %+v %v, runs %d; want a new run", r, err, runs)
	}
}
