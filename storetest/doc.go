// Package storetest runs tenure's conformance suites on a store: the
// lease, idempotency, rate-limit, session and schedule suites, each a
// set of subtests that assert what the store returns and what it really
// holds. A bug fixed in one store gets a case in the suite, and then every
// store is held to it.
//
// # A new store is one test file
//
// A store's conformance wiring is one test file that calls [Run] with a
// [Factory]. The factory says which primitives the store supports: each
// field returns the target of one suite for one case (a store, or a key
// space, of its own), and a nil field means the store does not have that
// primitive (Run logs which it leaves out). For the suites that read the
// store's clock (rate limits, sessions, schedules), [Factory.Clocks] says
// whether the store's clock can be driven: with [DrivenClock] the factory
// is given a fresh [Clock] for each case and the store must read it (an
// option such as memstore's Options.Clock); with [RealClock] it is given
// nil and the suite waits on the store's own clock; [BothClocks] runs the
// suite twice, as FakeClock and RealClock subtests.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Factory{
//			Lease: func(t *testing.T) leasetest.Target {
//				s := newStore(t)
//				faults := storetest.NewFaults()
//				return leasetest.Target{Store: faults.Leases(s.Leases()), Direct: s.Leases(), Faults: faults, ...}
//			},
//			RateLimit: func(t *testing.T, clock *storetest.Clock) ratelimittest.Target { ... },
//			Clocks: storetest.Clocks{RateLimit: storetest.DrivenClock},
//		})
//	}
//
// A store with more than one way to be built (two drivers, a cluster)
// calls Run once per way, each in a subtest of its own.
//
// # Faults
//
// The suites break the path between a store and its server to check what
// the primitives do then (the store is unreachable, a reply is lost). A
// store behind a network does this with a proxy of its own; an in-process
// store, which has no network to break, puts a [Faults] in front of its
// stores (Faults.Leases, Faults.Idempotency, Faults.Limits,
// Faults.Sessions, Faults.Schedules) and hands the same Faults to the
// suite. Faults also delays and pauses calls, for store-specific tests.
//
// The suites themselves (lease/leasetest, idempotency/idempotencytest,
// ratelimit/ratelimittest, session/sessiontest, schedule/scheduletest)
// stay callable on their own; Run is the one place that runs them all.
//
// # Servers in CI
//
// The stores' own tests start their servers (PostgreSQL, Redis, etcd) when
// the machine has them and skip otherwise; with TENURE_TEST_REQUIRE=1 in
// the environment a missing server fails the test instead, so that no
// suite is skipped unnoticed in CI.
package storetest
