// Package sqltx shows business code written once for tenure's SQL stores:
// it depends on the small interfaces of the primitive packages
// (fence.SQLGuard, idempotency.TxStore, schedule.SQLCompleter), which take
// a *sql.Tx, and runs unchanged on an embedded SQLite file
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

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
)

// Store is what the business code needs of a SQL store: the guard and the
// transactional idempotency record, both in the caller's transaction.
// *sqlitestore.Store and *pgstore.Store implement it.
type Store interface {
	fence.SQLGuard
	idempotency.TxStore
}

// Orders places orders in the table orders (id, item), written by the
// holder of a lease, once per idempotency key.
type Orders struct {
	DB     *sql.DB             // the database that holds orders and the store's tables
	Store  Store               // the SQL store on DB
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
	if err := o.Store.CheckHolder(ctx, tx, l); err != nil {
		return "", false, err
	}
	req := idempotency.Request{Scope: "orders", Key: key, Fingerprint: item}
	res, err := o.Keeper.DoTx(ctx, o.Store.IdempotencyTx(tx), req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
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
