package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

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
	clk.Advance(23 * time.Hour)
	if _, err := k.Do(ctx, other, fn); err != nil {
		t.Fatal(err)
	}
	if r, err := k.Do(ctx, req, fn); err != nil || !r.Replayed {
		t.Fatalf("after 23h: %+v %v, want a replay", r, err)
	}
	clk.Advance(time.Hour)
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
