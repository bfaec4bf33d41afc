package storetest

import (
	"testing"
	"time"

	"github.com/tenurekit/tenure/election/electiontest"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/storekit"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/session/sessiontest"
)

// Faults is a client-side fault hook for in-process stores: store errors
// (Cut: every call fails with the primitive's ErrUnavailable), lost replies
// (DropReplies), delays (Delay) and pauses (Pause, Resume), undone by Heal.
// Its Leases, Idempotency, Limits, Sessions and Schedules methods put it in
// front of a store. The zero value is healthy; it is safe for concurrent
// use.
type Faults = storekit.Faults

// NewFaults returns a healthy fault hook.
func NewFaults() *Faults { return storekit.NewFaults() }

// Schedules is a schedule.Store (and its claims store) behind a Faults,
// which it embeds; Polls counts the reads of its clock.
type Schedules = storekit.Schedules

// Clock is a store clock that the suites move by hand (Advance, Set, and
// Tick for a step at every reading); Follow mirrors it into a clock outside
// the process. It is safe for concurrent use.
type Clock = storekit.Clock

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return storekit.NewClock(start) }

// ClockMode says which clock a suite that reads the store's clock runs on.
type ClockMode uint8

const (
	// RealClock: the store keeps its own clock (a server's, or the
	// process's); the factory is given a nil Clock and the suite waits.
	RealClock ClockMode = iota
	// DrivenClock: the store's clock can be driven; the factory is given a
	// fresh Clock for each case, which the store must read.
	DrivenClock
	// BothClocks runs the suite twice: as the subtest "FakeClock" (as
	// DrivenClock) and as "RealClock" (as RealClock).
	BothClocks
)

// Clocks says, for each suite that reads the store's clock, which clocks
// it runs on. The zero value runs each on the store's own clock.
type Clocks struct {
	// RateLimit is for the rate-limit suite.
	RateLimit ClockMode
	// Session is for the session suite.
	Session ClockMode
	// Schedule is for the schedule suite.
	Schedule ClockMode
}

// Factory is one store under test: which primitives it supports, each as a
// function returning the target of one suite for one case. A nil field
// means the store does not support that primitive, and Run leaves the
// suite out (and logs it). Run calls a field once per case; each call
// should give the case a store, or a key space, of its own.
type Factory struct {
	// Lease is the lease suite's target; its Resource is a value behind
	// the store's fence guard.
	Lease func(t *testing.T) leasetest.Target
	// Idempotency is the idempotency suite's target (with Tx for stores
	// that are a business database).
	Idempotency func(t *testing.T) idempotencytest.Target
	// TxMiddleware is the target of the transactional HTTP middleware
	// cases, for SQL stores.
	TxMiddleware func(t *testing.T) idempotencytest.SQLTarget
	// RateLimit is the rate-limit suite's target. clock is nil on the
	// store's own clock; otherwise the store must read it. Run sets the
	// target's Clock to clock when it is nil.
	RateLimit func(t *testing.T, clock *Clock) ratelimittest.Target
	// Session is the session suite's target. clock is nil on the store's
	// own clock; otherwise the store must read it. Run sets the target's
	// Advance to clock.Advance when it is nil.
	Session func(t *testing.T, clock *Clock) sessiontest.Target
	// Schedule is the schedule suite's target. clock is nil on the store's
	// own clock; otherwise the store must read (or follow) it. Run sets the
	// target's Clock to clock when it is nil.
	Schedule func(t *testing.T, clock *Clock) scheduletest.Target
	// Clocks says which clocks RateLimit, Session and Schedule run on.
	// Default: the store's own clock for each.
	Clocks Clocks
}

// Where each suite's driven clock starts: far from the real time, so that
// a store that reads the wrong clock is caught.
var (
	rateLimitStart = time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC)
	sessionStart   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	scheduleStart  = time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Run runs, as subtests, every conformance suite that f's store supports:
// Lease, Election (on the lease target), Idempotency, TxMiddleware,
// RateLimit, Session and Schedule.
func Run(t *testing.T, f Factory) {
	var none []string
	suite := func(name string, supported bool, run func(t *testing.T)) {
		if !supported {
			none = append(none, name)
			return
		}
		t.Run(name, run)
	}
	suite("Lease", f.Lease != nil, func(t *testing.T) { leasetest.Run(t, f.Lease) })
	suite("Election", f.Lease != nil, func(t *testing.T) { electiontest.Run(t, f.Lease) })
	suite("Idempotency", f.Idempotency != nil, func(t *testing.T) { idempotencytest.Run(t, f.Idempotency) })
	suite("TxMiddleware", f.TxMiddleware != nil, func(t *testing.T) { idempotencytest.RunTxMiddleware(t, f.TxMiddleware) })
	suite("RateLimit", f.RateLimit != nil, func(t *testing.T) {
		clocked(t, f.Clocks.RateLimit, rateLimitStart, func(t *testing.T, clock func() *Clock) {
			ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
				c := clock()
				tg := f.RateLimit(t, c)
				if tg.Clock == nil {
					tg.Clock = c
				}
				return tg
			})
		})
	})
	suite("Session", f.Session != nil, func(t *testing.T) {
		clocked(t, f.Clocks.Session, sessionStart, func(t *testing.T, clock func() *Clock) {
			sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
				c := clock()
				tg := f.Session(t, c)
				if tg.Advance == nil && c != nil {
					tg.Advance = c.Advance
				}
				return tg
			})
		})
	})
	suite("Schedule", f.Schedule != nil, func(t *testing.T) {
		clocked(t, f.Clocks.Schedule, scheduleStart, func(t *testing.T, clock func() *Clock) {
			scheduletest.Run(t, func(t *testing.T) scheduletest.Target {
				c := clock()
				tg := f.Schedule(t, c)
				if tg.Clock == nil {
					tg.Clock = c
				}
				return tg
			})
		})
	})
	if len(none) == 7 {
		t.Fatal("storetest: the Factory supports no primitive")
	}
	if len(none) > 0 {
		t.Logf("storetest: the store does not support %v; those suites do not apply", none)
	}
}

// clocked runs suite on the clocks mode names; clock returns the clock for
// one case (a fresh one set to start, or nil for the store's own).
func clocked(t *testing.T, mode ClockMode, start time.Time, suite func(t *testing.T, clock func() *Clock)) {
	driven := func() *Clock { return NewClock(start) }
	own := func() *Clock { return nil }
	switch mode {
	case DrivenClock:
		suite(t, driven)
	case BothClocks:
		t.Run("FakeClock", func(t *testing.T) { suite(t, driven) })
		t.Run("RealClock", func(t *testing.T) { suite(t, own) })
	default:
		suite(t, own)
	}
}
