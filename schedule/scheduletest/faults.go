package scheduletest

import (
	"time"

	"github.com/tenurekit/tenure/internal/storekit"
	"github.com/tenurekit/tenure/schedule"
)

// Clock is the fake store clock (storetest.Clock), for stores whose clock
// can be injected (memstore, sqlitestore) or followed (PostgreSQL, through
// Follow).
type Clock = storekit.Clock

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return storekit.NewClock(t) }

// Faulty is a schedule.Store (and its claims lease store) behind a
// client-side fault hook (storetest.Faults), so that a test can cut one
// node off: after Cut every call fails with ErrUnavailable without
// reaching the store, as for a node whose process died or whose network is
// gone.
type Faulty = storekit.Schedules

// NewFaulty wraps s behind faults of its own.
func NewFaulty(s schedule.Store) *Faulty { return storekit.NewFaults().Schedules(s) }
