package proof

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
)

// The PostgreSQL store's guards in a pgx transaction. They are looked up by
// method set so that the workloads build with either name of the pgx forms
// (CheckHolderPgx, or CheckHolder taking a pgx.Tx).
type (
	pgxHolderChecker interface {
		CheckHolderPgx(ctx context.Context, tx pgx.Tx, l *lease.Lease) error
	}
	pgxHolderCheckerOld interface {
		CheckHolder(ctx context.Context, tx pgx.Tx, l *lease.Lease) error
	}
	pgxAdmitter interface {
		AdmitPgx(ctx context.Context, tx pgx.Tx, resource string, f uint64) error
	}
	pgxAdmitterOld interface {
		Admit(ctx context.Context, tx pgx.Tx, resource string, f uint64) error
	}
	pgxCompleter interface {
		CompleteSlotPgx(ctx context.Context, tx pgx.Tx, slot *schedule.Slot) error
	}
	pgxCompleterOld interface {
		CompleteSlot(ctx context.Context, tx pgx.Tx, slot *schedule.Slot) error
	}
)

var errNoPgxGuard = errors.New("proof: the PostgreSQL store has no guard for pgx transactions")

func (w *workerEnv) pgCheckHolder(ctx context.Context, tx pgx.Tx, l *lease.Lease) error {
	switch s := any(w.env.PG).(type) {
	case pgxHolderChecker:
		return s.CheckHolderPgx(ctx, tx, l)
	case pgxHolderCheckerOld:
		return s.CheckHolder(ctx, tx, l)
	}
	return errNoPgxGuard
}

func (w *workerEnv) pgAdmit(ctx context.Context, tx pgx.Tx, res string, f uint64) error {
	switch s := any(w.env.PG).(type) {
	case pgxAdmitter:
		return s.AdmitPgx(ctx, tx, res, f)
	case pgxAdmitterOld:
		return s.Admit(ctx, tx, res, f)
	}
	return errNoPgxGuard
}

func (w *workerEnv) pgCompleteSlot(ctx context.Context, tx pgx.Tx, slot *schedule.Slot) error {
	switch s := any(w.env.PG).(type) {
	case pgxCompleter:
		return s.CompleteSlotPgx(ctx, tx, slot)
	case pgxCompleterOld:
		return s.CompleteSlot(ctx, tx, slot)
	}
	return errNoPgxGuard
}
