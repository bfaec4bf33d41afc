package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/txn"
)

// The transactional entry point shared with pgstore.
var _ txn.Store = (*Store)(nil)

// Tx returns the store's operations bound to the caller's transaction tx
// (txn.Tx). Nothing it does commits or rolls back tx. On SQLite:
//
//   - Admit and AdmitAtLeast are one statement on <prefix>fences (an
//     upsert that only raises the stored fence, or keeps an equal one for
//     AdmitAtLeast). A refused fence returns a *fence.StaleError carrying
//     the current fence. Database errors wrap lease.ErrUnavailable.
//   - CheckHolder first takes SQLite's write lock for tx (a write statement
//     that changes nothing, the counterpart of SELECT ... FOR UPDATE; a
//     transaction from a database opened with [DSN] holds it from BEGIN
//     already), then reads the clock and the lease row. No acquirer can
//     commit until tx ends, so the check holds for every write tx makes
//     after it. A deferred transaction whose snapshot is already older
//     than the last commit cannot take the lock and gets an error wrapping
//     lease.ErrUnavailable (SQLITE_BUSY) instead.
//   - CompleteSlot takes the write lock the same way, then, on the store's
//     clock, refuses a slot already in <prefix>schedule_ledger
//     (schedule.ErrCompleted) or whose claim is not current
//     (schedule.ErrStale and lease.ErrNotHeld); otherwise it inserts (job,
//     slot, fence) into the ledger and marks the slot's record done.
//   - CheckSession takes the write lock the same way, then reads the
//     session's row on the store's clock. No revoke, rotation or save can
//     commit until tx ends.
//   - Idempotency's Claim takes the write lock for tx first, so a
//     concurrent duplicate waits (for up to the busy timeout) until tx
//     ends, and then replays the committed result, or claims the record
//     itself after a rollback.
func (s *Store) Tx(tx *sql.Tx) txn.Tx { return boundTx{s, tx} }

// boundTx is the store bound to one of the caller's transactions.
type boundTx struct {
	s  *Store
	tx *sql.Tx
}

func (t boundTx) Admit(ctx context.Context, resource string, f uint64) error {
	return t.s.admit(ctx, t.tx, resource, f, fence.Strict)
}

func (t boundTx) AdmitAtLeast(ctx context.Context, resource string, f uint64) error {
	return t.s.admit(ctx, t.tx, resource, f, fence.AtLeast)
}

func (t boundTx) CheckHolder(ctx context.Context, l *lease.Lease) error {
	return t.s.checkHolder(ctx, t.tx, l)
}

func (t boundTx) CompleteSlot(ctx context.Context, slot *schedule.Slot) error {
	return t.s.completeSlot(ctx, t.tx, slot)
}

func (t boundTx) CheckSession(ctx context.Context, id session.ID, version uint64) error {
	return t.s.checkSession(ctx, t.tx, id, version)
}

func (t boundTx) Idempotency() idempotency.Tx {
	return idemTx{idemView{t.s, t.s.idemQueries()}, t.tx}
}
