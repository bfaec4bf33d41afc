package sqlitestore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/tenurekit/tenure/idempotency/idempotencytest"
)

// TestIdempotencyTxMiddleware runs the TxMiddleware cases on a file opened
// with Open: the business rows and the record commit in one transaction.
func TestIdempotencyTxMiddleware(t *testing.T) {
	idempotencytest.RunTxMiddleware(t, func(t *testing.T) idempotencytest.SQLTarget {
		s := open(t, tempPath(t), nil)
		tt := idemTxTarget(t, s) // creates the business table
		return idempotencytest.SQLTarget{
			DB:     s.DB(),
			Store:  s,
			Direct: s.Idempotency(),
			Add: func(ctx context.Context, tx *sql.Tx, name string) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO `+idemBusiness+` (name) VALUES (?)`, name)
				return err
			},
			Count: tt.Count,
			Unit:  unit,
		}
	})
}
