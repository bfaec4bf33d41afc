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

// Admit admits fence f for resource inside the caller's transaction tx, in
// strict mode: f must be greater than every fence admitted for resource
// before. It is one statement on the <prefix>fences table (an upsert that
// only raises the stored fence), so it commits or rolls back together with
// the caller's own writes in tx. If f is not newer, Admit returns a
// *fence.StaleError (errors.Is fence.ErrStale) carrying the current fence,
// changes nothing, and the caller must roll tx back.
//
// Resource names follow the rules of lease keys (leasedriver.ValidateKey); f must
// be between 1 and math.MaxInt64. Bad input returns an error wrapping
// lease.ErrInvalid and writes nothing. Database errors wrap
// lease.ErrUnavailable.
//
// A max-fence guard does not look at time: a holder whose lease expired is
// still admitted until the next holder has written. Use [Store.CheckHolder]
// where that window matters.
func (s *Store) Admit(ctx context.Context, tx *sql.Tx, resource string, f uint64) error {
	return s.admit(ctx, tx, resource, f, fence.Strict)
}

// AdmitAtLeast is Admit in at-least mode: a fence equal to the greatest one
// admitted is also accepted, for several writes within one tenure.
func (s *Store) AdmitAtLeast(ctx context.Context, tx *sql.Tx, resource string, f uint64) error {
	return s.admit(ctx, tx, resource, f, fence.AtLeast)
}

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

// CheckHolder checks, inside the caller's transaction tx, that l is the
// current holder of its key: the key's row has l's token and fence and has
// not expired on the store's clock. Otherwise it returns an error wrapping
// lease.ErrNotHeld, and the caller must roll tx back.
//
// CheckHolder first takes SQLite's write lock for tx (a write statement that
// changes nothing, the counterpart of SELECT ... FOR UPDATE; a transaction
// from a database opened with [DSN] holds it from BEGIN already), then reads
// the clock and the row. No acquirer can commit until tx ends, so the check
// holds for every write tx makes after it. A deferred transaction whose
// snapshot is already older than the last commit cannot take the lock and
// gets an error wrapping lease.ErrUnavailable (SQLITE_BUSY) instead.
//
// Unlike the max-fence guard, CheckHolder refuses a holder whose lease
// expired even before the next holder wrote.
func (s *Store) CheckHolder(ctx context.Context, tx *sql.Tx, l *lease.Lease) error {
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
