package schedule

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurekit/tenure/lease"
)

// Slot is one firing of a job as its handler sees it: the job, the slot's
// nominal time and stable ID, and the claim under which this attempt runs.
type Slot struct {
	// Job is the job's name.
	Job string
	// Time is the slot's nominal fire time (not when the attempt started).
	Time time.Time
	// ID is the slot's stable ID: the same on every node and after a
	// restart, so a recovered slot is the same slot.
	ID string
	// Fence is the claim's fencing token: strictly greater than the fence
	// of every earlier attempt at this slot. Pass it (or the Slot) to the
	// guard where the effect lands.
	Fence uint64
	// Attempt counts this slot's attempts, this one included (a dead
	// node's attempt counts too).
	Attempt int

	lease *lease.Lease
}

// Lease returns the claim lease of this attempt. The stores' completion
// guards (CompleteSlot) check it: its token, fence and expiry on the
// store's clock. Its token is a secret; the lease prints without it.
func (s *Slot) Lease() *lease.Lease { return s.lease }

// String describes the slot.
func (s *Slot) String() string {
	return fmt.Sprintf("slot{job=%q id=%s fence=%d attempt=%d}", s.Job, s.ID, s.Fence, s.Attempt)
}

// LogValue describes the slot to log/slog.
func (s *Slot) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("job", s.Job),
		slog.String("id", s.ID),
		slog.Uint64("fence", s.Fence),
		slog.Int("attempt", s.Attempt),
	)
}

// Format makes every fmt verb print the String form (never the lease's
// token).
func (s *Slot) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }
