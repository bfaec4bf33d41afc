package memstore

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/retention"
)

// sweepScanFactor bounds the lease records one Sweep examines: this many
// times Options.Limit.
const sweepScanFactor = 10

// Sweep deletes lease records whose lease ended at least o.FenceRetention
// ago (default 0) and that no waiter is queued for, raising the store's
// fence floor to their fences first, so a later grant of their key is still
// above every fence it had; it examines at most 10×o.Limit records and
// deletes at most o.Limit. It also deletes schedule slot records final for
// o.ScheduleRetention (default 30 days), each job's latest excepted, with
// their ledger entries, at most o.Limit. Result.More says to call again.
// Held leases and live records are never touched. The other primitives'
// expired records are dropped as the store is written (idempotency
// records, sessions, rate limit state).
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
	// Queues of waiters that all left or crashed.
	for k := range s.queues {
		s.queue(k, now)
	}
	deleted, more := s.reclaim(now, o.Limit, o.FenceRetention)
	res.More = more
	res.Add(retention.Leases, deleted)
	slots, ledger := s.sched().sweep(now.Add(-o.ScheduleRetention), o.Limit)
	res.Add(retention.ScheduleSlots, slots)
	res.Add(retention.ScheduleLedger, ledger)
	if slots >= o.Limit {
		res.More = true
	}
	if s.leasesPeak >= 1024 && len(s.leases) < s.leasesPeak/4 {
		m := make(map[string]*leaseRec, len(s.leases))
		for k, r := range s.leases {
			m[k] = r
		}
		s.leases, s.leasesPeak = m, len(m)
	}
	return res, nil
}

// StartSweeper runs Sweep every interval until ctx ends or stop is called
// (see retention.Start).
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration, o retention.Options) (stop func(), err error) {
	return retention.Start(ctx, s, interval, o, nil)
}

// ForgetEnded drops the record of every lease that is not held and whose
// fence the store's clock has passed, and the fence floor, as a process
// that restarted would have lost them, and reports how many records it
// dropped. It is for experiments and tests of what fences do after data
// loss (tenure lab, tenure proof); a service reclaims ended leases with
// Sweep, which keeps the floor.
func (s *Store) ForgetEnded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	clock := uint64(max(now.UnixMicro(), 0))
	n := 0
	for k, r := range s.leases {
		if !r.held(now) && r.fence < clock {
			delete(s.leases, k)
			n++
		}
	}
	s.floor = 0
	return n
}

// RaiseFence sets the fence of key's lease held by token to f, as a grant
// made while the store's clock ran far ahead would have left it. It reports
// whether token held key with a fence below f (nothing changes otherwise).
// Like DropLease, it is for experiments on what fences do after a clock
// jump or a lost floor (tenure proof); a service never calls it.
func (s *Store) RaiseFence(key, token string, f uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.leases[key]
	if r == nil || !r.held(s.now()) || r.token != token || r.fence >= f {
		return false
	}
	r.fence = f
	return true
}

// DropLease drops key's record if its lease ended, without raising the
// fence floor, as a store that kept no floor would, and reports whether it
// did. It is for experiments (see RaiseFence).
func (s *Store) DropLease(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.leases[key]
	if r == nil || r.held(s.now()) {
		return false
	}
	delete(s.leases, key)
	return true
}

// sweep deletes at most limit slot records final since before (or, never
// started, due before it), except each job's latest slot, with their
// ledger entries, and reports how many of each it deleted. Store.mu is
// held.
func (st *schedState) sweep(before time.Time, limit int) (slots, ledger int) {
	for job, recs := range st.recs {
		var latest time.Time
		for _, r := range recs {
			if r.SlotTime.After(latest) {
				latest = r.SlotTime
			}
		}
		for id, r := range recs {
			if slots >= limit {
				return slots, ledger
			}
			end := r.Finished
			if end.IsZero() {
				end = r.SlotTime
			}
			if !r.Final() || !r.SlotTime.Before(latest) || end.After(before) {
				continue
			}
			delete(recs, id)
			slots++
			if _, ok := st.ledger[job][id]; ok {
				delete(st.ledger[job], id)
				ledger++
			}
		}
	}
	return slots, ledger
}
