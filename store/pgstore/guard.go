package pgstore

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

func (s *Store) admit(ctx context.Context, tx querier, resource string, f uint64, mode fence.Mode) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return fmt.Errorf("pgstore: resource: %w", err)
	}
	if f == 0 || f > math.MaxInt64 {
		return fmt.Errorf("%w: pgstore: fence %d out of range [1, %d]", lease.ErrInvalid, f, int64(math.MaxInt64))
	}
	if tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", lease.ErrInvalid)
	}
	q := s.q.admitStrict
	if mode == fence.AtLeast {
		q = s.q.admitAtLeast
	}
	var got int64
	err := tx.queryRow(ctx, q, []any{resource, int64(f)}, &got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return s.wrap(ctx, fmt.Sprintf("admit fence %d for %q", f, resource), err)
	}
	stale := &fence.StaleError{Resource: resource, Fence: f}
	// The refused upsert locked the row; read what it holds for the error.
	// The refusal stands whether or not this read works.
	var cur int64
	if tx.queryRow(ctx, s.q.admitted, []any{resource}, &cur) == nil && cur > 0 {
		stale.Current = uint64(cur)
	}
	obs.GuardRefused(ctx, "pgstore", obs.GuardAdmit)
	return stale
}

func (s *Store) checkHolder(ctx context.Context, tx querier, l *lease.Lease) error {
	if l == nil {
		return fmt.Errorf("%w: pgstore: nil lease", lease.ErrInvalid)
	}
	if tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", lease.ErrInvalid)
	}
	if err := leasedriver.ValidateKey(l.Key()); err != nil {
		return err
	}
	if err := pgToken(l.Token().Reveal()); err != nil {
		return err
	}
	if l.Fence() == 0 || l.Fence() > math.MaxInt64 {
		return fmt.Errorf("%w: pgstore: fence %d out of range [1, %d]", lease.ErrInvalid, l.Fence(), int64(math.MaxInt64))
	}
	var f int64
	err := tx.queryRow(ctx, s.q.checkHolder, []any{l.Key(), l.Token().Reveal(), int64(l.Fence())}, &f)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		obs.GuardRefused(ctx, "pgstore", obs.GuardCheckHolder)
		return fmt.Errorf("pgstore: check holder of %q with fence %d: %w (%w)", l.Key(), l.Fence(), lease.ErrNotHeld, fence.ErrStale)
	}
	return s.wrap(ctx, fmt.Sprintf("check holder of %q", l.Key()), err)
}
