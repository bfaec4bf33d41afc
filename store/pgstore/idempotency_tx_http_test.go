package pgstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/tenurekit/tenure/idempotency/idempotencytest"
)

// TestIdempotencyTxMiddleware runs the TxMiddleware cases on a Store made
// by NewDB on database/sql (pgx's stdlib driver): the business rows and
// the record commit in one transaction.
func TestIdempotencyTxMiddleware(t *testing.T) {
	idempotencytest.RunTxMiddleware(t, func(t *testing.T) idempotencytest.SQLTarget {
		sqlDB, db := freshSQL(t, driverPgx)
		if _, err := sqlDB.ExecContext(ctxT(t), `CREATE TABLE idem_business (id bigserial PRIMARY KEY, name text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return idempotencytest.SQLTarget{
			DB:     sqlDB,
			Store:  db,
			Direct: db.Idempotency(),
			Add: func(ctx context.Context, tx *sql.Tx, name string) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO idem_business (name) VALUES ($1)`, name)
				return err
			},
			Count: func(ctx context.Context, name string) (int, error) {
				var n int
				err := sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM idem_business WHERE name = $1`, name).Scan(&n)
				return n, err
			},
		}
	})
}
