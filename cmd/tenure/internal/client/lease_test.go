package client_test

import (
	"testing"
	"time"

	"github.com/tenurekit/tenure/election/electiontest"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// unit is the suites' short TTL over serve: an HTTP round trip, the race
// detector and other test binaries on a loaded machine stand between the
// caller and the store, and a keep-alive renewing every unit/3 must still
// land in time.
const unit = 750 * time.Millisecond

// claimUnit is the session and idempotency suites' short time unit (an
// idle timeout, a claim TTL, a retention) over serve on a real clock.
// Smaller than unit: no case there needs a renewal of a one-unit claim to
// land in time (the idempotency keep-alive case holds a claim of at least
// a second), so the unit only has to outlast a few HTTP round trips.
const claimUnit = 400 * time.Millisecond

// TestElectionConformanceSQLite runs the election suite against tenure
// serve on a SQLite file through the client's Leases view: campaigners
// keep their places in the server's queue of waiters.
func TestElectionConformanceSQLite(t *testing.T) {
	electiontest.Run(t, func(t *testing.T) leasetest.Target {
		s := startSQLite(t, "", nil)
		f := &faults{}
		return leasetest.Target{
			Store:  newClient(t, s.url, f).Leases(),
			Direct: newClient(t, s.url, nil).Leases(),
			Faults: f,
			Unit:   unit,
		}
	})
}

// TestLeaseConformanceSQLite runs the lease suite against tenure serve on
// a SQLite file through the client's Leases view; faults break the HTTP
// path, and Restart stops the server and the store and serves the same
// file again.
func TestLeaseConformanceSQLite(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Target {
		s := startSQLite(t, "", nil)
		f := &faults{}
		c := newClient(t, s.url, f)
		direct := newClient(t, s.url, nil)
		return leasetest.Target{
			Store:  c.Leases(),
			Direct: direct.Leases(),
			Faults: f,
			Restart: func(t *testing.T) lease.Store {
				s.stop()
				if err := s.store.Close(); err != nil {
					t.Fatal(err)
				}
				s2 := startSQLite(t, s.path, nil)
				return newClient(t, s2.url, nil).Leases()
			},
			Resource: resource{c: direct, plain: s.kv.PlainWrite},
			Unit:     unit,
		}
	})
}
