package fence

import (
	"context"
	"database/sql"

	"github.com/tenurekit/tenure/lease"
)

// SQLGuard is the resource-side guard of the SQL stores, run inside the
// caller's own database/sql transaction: business code that depends on
// SQLGuard runs unchanged on an embedded SQLite file (sqlitestore) in
// development and tests and on PostgreSQL (pgstore, on any database/sql
// driver) in production. Both stores' *Store implement it.
//
// Each method works in tx and never commits or rolls it back: on an error
// the caller rolls tx back, so that its own writes in tx do not land.
type SQLGuard interface {
	// Admit admits fence for resource if it is greater than every fence
	// admitted for resource before (one write per tenure). A refused fence
	// returns a *StaleError (errors.Is ErrStale) and changes nothing.
	Admit(ctx context.Context, tx *sql.Tx, resource string, fence uint64) error
	// AdmitAtLeast is Admit that also admits a fence equal to the greatest
	// admitted one (several writes within one tenure).
	AdmitAtLeast(ctx context.Context, tx *sql.Tx, resource string, fence uint64) error
	// CheckHolder checks that l still holds its key (token, fence and
	// expiry on the database's clock) and keeps the lease row locked until
	// tx ends, so no other holder takes the key before tx commits. A
	// holder that lost its key gets an error wrapping lease.ErrNotHeld and
	// ErrStale.
	CheckHolder(ctx context.Context, tx *sql.Tx, l *lease.Lease) error
}
