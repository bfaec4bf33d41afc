package proof

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
)

// The PostgreSQL store's guards in the workloads' pgx transactions.

func (w *workerEnv) pgCheckHolder(ctx context.Context, tx pgx.Tx, l *lease.Lease) error {
	return w.env.PG.PgxTx(tx).CheckHolder(ctx, l)
}

func (w *workerEnv) pgAdmit(ctx context.Context, tx pgx.Tx, res string, f uint64, atLeast bool) error {
	if atLeast {
		return w.env.PG.PgxTx(tx).AdmitAtLeast(ctx, res, f)
	}
	return w.env.PG.PgxTx(tx).Admit(ctx, res, f)
}

func (w *workerEnv) pgCompleteSlot(ctx context.Context, tx pgx.Tx, slot *schedule.Slot) error {
	return w.env.PG.PgxTx(tx).CompleteSlot(ctx, slot)
}
