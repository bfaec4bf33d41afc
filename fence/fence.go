// Package fence holds the contract of resource-side guards: the check, at
// the place where a protected write lands, that the writer's fencing token
// is not older than one the resource has already admitted.
//
// A lease coordinates; it does not protect. A holder that paused past its
// lease still believes it holds it, and its late write must be refused by
// the resource itself. Every grant of a [lease.Store] carries a fence that is
// strictly greater than every earlier one for that key; a guard keeps, per
// resource, the greatest fence it has admitted and refuses older ones with
// [ErrStale] in the same atomic step as the write (one SQL statement in the
// caller's transaction, a Lua script, an etcd transaction).
//
// Two admission modes exist:
//
//   - Strict (the default): a fence is admitted only if it is greater than
//     every fence admitted before. One write per tenure.
//   - AtLeast: a fence equal to the greatest admitted one is also accepted,
//     for several writes within one tenure.
//
// A max-fence guard is blind to time: if holder A's lease expired but the
// next holder B has not written yet, A's fence is still the greatest and is
// admitted. Where the lease lives in the same database as the resource
// (PostgreSQL, SQLite), the stores also offer a strict current-holder check
// (CheckHolder) that locks the lease row and checks token, fence and expiry
// on the database's clock, which closes that window.
//
// The guards themselves live with the stores: pgstore and sqlitestore
// (Admit, AdmitAtLeast, CheckHolder, in the caller's *sql.Tx through the
// store's Tx, package txn, so business code can depend on txn.Store
// instead of a store), redisstore and memstore (FencedSet, FencedGet), etcdstore (a
// compare for the caller's own transaction, and FencedPut).
package fence

import (
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
)

// ErrStale reports that a resource refused a write because it has already
// admitted a newer fence. The caller's write did not happen; in a
// transaction the caller must roll back. A failed strict holder check
// (CheckHolder) wraps both lease.ErrNotHeld and ErrStale, so one errors.Is
// test catches every guard refusal.
var ErrStale = kind.New("fence: stale fence", tenure.ErrStale)

// Mode says which fences a guard admits.
type Mode int

const (
	// Strict admits only a fence greater than every fence admitted before.
	Strict Mode = iota
	// AtLeast also admits a fence equal to the greatest admitted one.
	AtLeast
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case AtLeast:
		return "at-least"
	}
	return fmt.Sprintf("fence.Mode(%d)", int(m))
}

// Admits reports whether a guard in mode m that has admitted current admits
// incoming.
func (m Mode) Admits(current, incoming uint64) bool {
	if m == AtLeast {
		return incoming >= current
	}
	return incoming > current
}

// StaleError is the detailed form of ErrStale.
type StaleError struct {
	// Resource is the guarded resource.
	Resource string
	// Fence is the fence that was refused.
	Fence uint64
	// Current is the greatest fence the resource has admitted, if known.
	Current uint64
}

func (e *StaleError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("fence: stale fence %d for %q", e.Fence, e.Resource)
	}
	return fmt.Sprintf("fence: stale fence %d for %q (admitted %d)", e.Fence, e.Resource, e.Current)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }
