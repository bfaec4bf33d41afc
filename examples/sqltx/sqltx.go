// Package sqltx shows business code written once for tenure's SQL stores:
// it depends on txn.Store, the transactional entry point both SQL stores
// implement (Tx binds the store to a *sql.Tx and returns the guards, the
// slot completion and the idempotency record), and runs unchanged on an
// embedded SQLite file
// (sqlitestore) in development and tests and on PostgreSQL (pgstore, on
// any database/sql driver) in production.
//
// The SQL it sends itself is written in the common subset of both
// dialects: numbered placeholders ($1, $2, ... each once, in order) and
// INSERT ... RETURNING.
package sqltx

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/txn"
)

// Orders places orders in the table orders (id, item), written by the
// holder of a lease, once per idempotency key.
type Orders struct {
	DB     *sql.DB             // the database that holds orders and the store's tables
	Store  txn.Store           // the SQL store on DB (*sqlitestore.Store, *pgstore.Store)
	Keeper *idempotency.Keeper // on Store's idempotency view
}

// Place inserts an order for item in one transaction that also checks that
// l still holds its lease (a paused holder whose lease ran out writes
// nothing) and records the result under key: a retry with the same key
// replays the order's id instead of inserting a second row. The
// transaction commits only when all of that succeeded.
func (o *Orders) Place(ctx context.Context, l *lease.Lease, key, item string) (id string, replayed bool, err error) {
	tx, err := o.DB.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback() // a no-op after Commit
	t := o.Store.Tx(tx)
	if err := t.CheckHolder(ctx, l); err != nil {
		return "", false, err
	}
	req := idempotency.Request{Scope: "orders", Key: key, Fingerprint: item}
	res, err := o.Keeper.DoTx(ctx, t.Idempotency(), req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
		var n int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES ($1) RETURNING id`, item).Scan(&n); err != nil {
			return nil, err
		}
		return []byte(strconv.FormatInt(n, 10)), nil
	})
	if err != nil && !idempotency.Recorded(err) {
		return "", false, err
	}
	if cerr := tx.Commit(); cerr != nil {
		return "", false, errors.Join(err, cerr)
	}
	return string(res.Value), res.Replayed, err
}
