package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// Admit admits fence f for resource inside the caller's transaction tx, in
// strict mode: f must be greater than every fence admitted for resource
// before (one write per tenure). tx may come from any PostgreSQL driver
// for database/sql (pgx's stdlib driver, lib/pq) and from any database/sql
// helper (sqlx, GORM's ConnPool); [Store.AdmitPgx] takes a pgx.Tx. It is
// one statement on the fences table (an upsert that raises the stored
// fence only when f is greater); the resource's row stays locked until tx
// ends, so concurrent admissions of the same resource are serialized.
// Admit never commits or rolls back tx.
//
// A refused fence returns a *fence.StaleError (errors.Is fence.ErrStale)
// and changes nothing; the caller must then roll tx back, so that its own
// writes in tx do not land. Resource names follow the rules of lease keys
// (leasedriver.ValidateKey); a bad name or a fence of 0 (or above the largest
// bigint) wraps lease.ErrInvalid.
//
// Admit is blind to time: if the holder of f has expired but no newer
// fence has been admitted yet, f is still admitted. [Store.CheckHolder]
// closes that window.
func (s *Store) Admit(ctx context.Context, tx *sql.Tx, resource string, f uint64) error {
	return s.admit(ctx, sqlTx(tx), resource, f, fence.Strict)
}

// AdmitAtLeast is [Store.Admit] that also admits a fence equal to the
// greatest admitted one, for several writes within one tenure.
func (s *Store) AdmitAtLeast(ctx context.Context, tx *sql.Tx, resource string, f uint64) error {
	return s.admit(ctx, sqlTx(tx), resource, f, fence.AtLeast)
}

// AdmitPgx is [Store.Admit] in a pgx transaction.
func (s *Store) AdmitPgx(ctx context.Context, tx pgx.Tx, resource string, f uint64) error {
	return s.admit(ctx, pgxTx(tx), resource, f, fence.Strict)
}

// AdmitAtLeastPgx is [Store.AdmitAtLeast] in a pgx transaction.
func (s *Store) AdmitAtLeastPgx(ctx context.Context, tx pgx.Tx, resource string, f uint64) error {
	return s.admit(ctx, pgxTx(tx), resource, f, fence.AtLeast)
}

// sqlTx returns the querier of a caller's *sql.Tx, nil for a nil tx.
func sqlTx(tx *sql.Tx) querier {
	if tx == nil {
		return nil
	}
	return sqlQ{tx}
}

// pgxTx returns the querier of a caller's pgx.Tx, nil for a nil tx.
func pgxTx(tx pgx.Tx) querier {
	if tx == nil {
		return nil
	}
	return pgxQ{tx}
}

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

// CheckHolder checks, inside the caller's transaction tx (from any
// database/sql driver; [Store.CheckHolderPgx] takes a pgx.Tx), that l is
// the current holder of its key: the lease row has l's token and fence and has
// not expired on the database's clock (clock_timestamp()). It locks the row
// (SELECT ... FOR UPDATE) until tx ends, so no other holder can acquire,
// renew or release the key before tx commits or rolls back: writes made
// in tx after a successful check are ordered before the next tenure. Keep
// such transactions short; an acquirer waits for them.
//
// If l does not hold its key (it expired, was released, or another holder
// took it), the error wraps lease.ErrNotHeld and fence.ErrStale; the
// caller must roll tx back. Unlike [Store.Admit], this refuses a holder
// whose lease expired even when the next holder has not written yet.
//
// In a READ COMMITTED transaction (PostgreSQL's default) a check that has
// to wait for the row re-checks the newest version. In REPEATABLE READ or
// SERIALIZABLE, a lease row changed since the transaction's snapshot makes
// PostgreSQL abort with a serialization failure (a plain error): retry the
// transaction. CheckHolder never commits or rolls back tx.
func (s *Store) CheckHolder(ctx context.Context, tx *sql.Tx, l *lease.Lease) error {
	return s.checkHolder(ctx, sqlTx(tx), l)
}

// CheckHolderPgx is [Store.CheckHolder] in a pgx transaction.
func (s *Store) CheckHolderPgx(ctx context.Context, tx pgx.Tx, l *lease.Lease) error {
	return s.checkHolder(ctx, pgxTx(tx), l)
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
