package memstore

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/retention"
)

// sweepScanFactor bounds the lease records one Sweep examines: this many
// times Options.Limit.
const sweepScanFactor = 10

// Sweep deletes lease records that have not been held for
// o.FenceRetention (default 7 days) and whose last fence the store's clock
// has passed (lease/driver.NextFence floors every later fence at the clock, so the
// next grant is still above it). It examines at most 10×o.Limit records
// and deletes at most o.Limit; Result.More says to call again. Held leases
// are never touched. The other primitives' expired records are dropped as
// the store is written (idempotency records, sessions, rate limit state),
// so Sweep reports leases only.
func (s *Store) Sweep(ctx context.Context, o retention.Options) (retention.Result, error) {
	o, err := o.Resolve()
	if err != nil {
		return retention.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return retention.Result{}, err
	}
	var res retention.Result
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	floor := uint64(max(now.UnixMicro(), 0))
	examined, deleted := 0, 0
	for k, r := range s.leases {
		if examined >= sweepScanFactor*o.Limit || deleted >= o.Limit {
			res.More = true
			break
		}
		examined++
		if sweepable(r, now, floor, o.FenceRetention) {
			delete(s.leases, k)
			deleted++
		}
	}
	// Queues of waiters that all left or crashed.
	for k := range s.queues {
		s.queue(k, now)
	}
	res.Add(retention.Leases, deleted)
	if s.leasesPeak >= 1024 && len(s.leases) < s.leasesPeak/4 {
		m := make(map[string]*leaseRec, len(s.leases))
		for k, r := range s.leases {
			m[k] = r
		}
		s.leases, s.leasesPeak = m, len(m)
	}
	return res, nil
}

// sweepable reports whether a lease record may go: not held, ended at
// least retention ago, and its fence below the clock floor.
func sweepable(r *leaseRec, now time.Time, floor uint64, retention time.Duration) bool {
	return !r.held(now) && !r.expires.After(now.Add(-retention)) && r.fence < floor
}

// StartSweeper runs Sweep every interval until ctx ends or stop is called
// (see retention.Start).
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration, o retention.Options) (stop func(), err error) {
	return retention.Start(ctx, s, interval, o, nil)
}
