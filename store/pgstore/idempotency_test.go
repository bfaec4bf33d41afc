package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/store/pgstore"
)

// prepareIdem prepares the idempotency statements on every connection the
// pool may open (poolVia prepared the lease statements), so a request sent
// while a proxy drops replies really reaches the server.
func prepareIdem(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store) {
	t.Helper()
	ctx := ctxT(t)
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		for _, sql := range pgstore.IdempotencyStatements(db) {
			if _, err := c.Conn().Prepare(ctx, sql, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// idemBiz is the caller's own table, written in the caller's transaction.
type idemBiz struct{ tx pgx.Tx }

func (b idemBiz) Add(ctx context.Context, name string) error {
	_, err := b.tx.Exec(ctx, `INSERT INTO idem_business (name) VALUES ($1)`, name)
	return err
}

func idemTxTarget(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store) *idempotencytest.TxTarget {
	t.Helper()
	if _, err := pool.Exec(ctxT(t), `CREATE TABLE IF NOT EXISTS idem_business (id bigserial PRIMARY KEY, name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &idempotencytest.TxTarget{
		Run: func(ctx context.Context, body func(tx idempotency.Tx, biz idempotencytest.Business) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return body(db.PgxTx(tx).Idempotency(), idemBiz{tx}) })
		},
		Count: func(ctx context.Context, name string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_business WHERE name = $1`, name).Scan(&n)
			return n, err
		},
	}
}

// TestIdempotencyTxKilledConnection kills the backend of a transaction that
// has claimed a key and written a business row, before it commits: the
// server rolls both back, and the retry runs once.
func TestIdempotencyTxKilledConnection(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	tg := idemTxTarget(t, pool, db)
	k, err := idempotency.New(db.Idempotency(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "user:7 POST /receipts", Key: "r-1", Fingerprint: "fp"}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := k.DoTx(ctx, db.PgxTx(tx).Idempotency(), req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			if err := (idemBiz{tx}).Add(ctx, "receipt"); err != nil {
				return nil, err
			}
			var pid int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return nil, err
			}
			if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				return nil, err
			}
			return []byte("receipt"), nil
		})
		return err
	})
	if err == nil {
		t.Fatal("the transaction of a killed connection committed")
	}
	if rec, err := db.Idempotency().Inspect(ctx, req.ID()); err != nil || rec.Exists {
		t.Fatalf("record after the kill: %+v %v, want none", rec, err)
	}
	if n, _ := tg.Count(ctx, "receipt"); n != 0 {
		t.Fatalf("%d business rows after the kill, want 0", n)
	}
	var res idempotency.Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = k.DoTx(ctx, db.PgxTx(tx).Idempotency(), req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			return []byte("receipt"), (idemBiz{tx}).Add(ctx, "receipt")
		})
		return err
	})
	if err != nil || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if n, _ := tg.Count(ctx, "receipt"); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// TestIdempotencyPurgeAndSchema checks PurgeIdempotency and that a Store
// with a bad schema refuses every idempotency call with ErrInvalid.
func TestIdempotencyPurgeAndSchema(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	k, err := idempotency.New(db.Idempotency(), &idempotency.Options{Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := idempotency.New(db.Idempotency(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) { return []byte("v"), nil }
	if _, err := k.Do(ctx, idempotency.Request{Scope: "s", Key: "gone"}, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := keep.Do(ctx, idempotency.Request{Scope: "s", Key: "kept"}, fn); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := db.Idempotency().Inspect(ctx, idempotency.ID{Scope: "s", Key: "gone"})
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Exists {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("record did not expire")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n, err := db.PurgeIdempotency(ctx); err != nil || n != 1 {
		t.Fatalf("PurgeIdempotency = %d, %v; want 1", n, err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.idempotency`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows left (%v), want 1", rows, err)
	}
}
