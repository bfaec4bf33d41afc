package sqltx_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurekit/tenure/examples/sqltx"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// newOrders returns Orders on a SQLite file of its own in t.TempDir(): a
// unit test of business code needs no server.
func newOrders(t *testing.T) (*sqltx.Orders, *lease.Locker) {
	t.Helper()
	db, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "app.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.DB().ExecContext(t.Context(), `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	keeper, err := idempotency.New(db.Idempotency(), nil)
	if err != nil {
		t.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &sqltx.Orders{DB: db.DB(), Store: db, Keeper: keeper}, locker
}

func count(t *testing.T, o *sqltx.Orders) int {
	t.Helper()
	var n int
	if err := o.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A retry replays the first order; another item under the same key is a
// mismatch and writes nothing; a holder that lost its lease writes nothing.
func TestPlace(t *testing.T) {
	o, locker := newOrders(t)
	ctx := t.Context()
	l, err := locker.TryAcquire(ctx, "orders", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, replayed, err := o.Place(ctx, l, "k1", "book")
	if err != nil || replayed || id != "1" {
		t.Fatalf("first Place = %q, %v, %v", id, replayed, err)
	}
	id, replayed, err = o.Place(ctx, l, "k1", "book")
	if err != nil || !replayed || id != "1" {
		t.Fatalf("retry = %q, %v, %v; want the replayed order 1", id, replayed, err)
	}
	if _, _, err := o.Place(ctx, l, "k1", "pen"); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("other item under the same key: %v, want ErrMismatch", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Place(ctx, l, "k2", "pen"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("after release: %v, want ErrNotHeld", err)
	}
	if n := count(t, o); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}
