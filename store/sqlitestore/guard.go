package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

func (s *Store) admit(ctx context.Context, tx *sql.Tx, resource string, f uint64, mode fence.Mode) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return fmt.Errorf("sqlitestore: resource: %w", err)
	}
	if f == 0 || f > math.MaxInt64 {
		return fmt.Errorf("%w: sqlitestore: fence %d for %q out of range [1, %d]", lease.ErrInvalid, f, resource, int64(math.MaxInt64))
	}
	if tx == nil {
		return fmt.Errorf("%w: sqlitestore: nil transaction", lease.ErrInvalid)
	}
	q := s.q.admit
	if mode == fence.AtLeast {
		q = s.q.admitAtLeast
	}
	var got int64
	err := tx.QueryRowContext(ctx, q, resource, int64(f)).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return txError("admit", resource, err)
	}
	var cur int64
	if err := tx.QueryRowContext(ctx, s.q.fenceOf, resource).Scan(&cur); err != nil {
		return txError("admit", resource, err)
	}
	obs.GuardRefused(ctx, "sqlitestore", obs.GuardAdmit)
	return &fence.StaleError{Resource: resource, Fence: f, Current: uint64(cur)}
}

func (s *Store) checkHolder(ctx context.Context, tx *sql.Tx, l *lease.Lease) error {
	if l == nil {
		return fmt.Errorf("%w: sqlitestore: nil lease", lease.ErrInvalid)
	}
	if tx == nil {
		return fmt.Errorf("%w: sqlitestore: nil transaction", lease.ErrInvalid)
	}
	key := l.Key()
	if l.Fence() == 0 || l.Fence() > math.MaxInt64 {
		obs.GuardRefused(ctx, "sqlitestore", obs.GuardCheckHolder)
		return fmt.Errorf("%w: sqlitestore: %q: the lease's fence %d was never granted here", lease.ErrNotHeld, key, l.Fence())
	}
	if _, err := tx.ExecContext(ctx, s.q.lock); err != nil {
		return txError("check holder", key, err)
	}
	var one int
	err := tx.QueryRowContext(ctx, s.q.holder, key, l.Token().Reveal(), int64(l.Fence()), s.nowUS()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		obs.GuardRefused(ctx, "sqlitestore", obs.GuardCheckHolder)
		return fmt.Errorf("%w: sqlitestore: %q is not held by the lease with fence %d", lease.ErrNotHeld, key, l.Fence())
	}
	if err != nil {
		return txError("check holder", key, err)
	}
	return nil
}

// txError wraps a database error inside the caller's transaction: a
// transaction that has already ended is the caller's mistake; anything else
// is the store being unavailable.
func txError(op, name string, err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlitestore: %s %q: %w", op, name, err)
	}
	return unavailable(op, name, err)
}
