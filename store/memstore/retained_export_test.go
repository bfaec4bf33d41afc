package memstore

import (
	"slices"

	"github.com/tenurekit/tenure/session"
)

// IdempotencyRecords returns the keys of the idempotency records the store
// holds in scope, whatever their state (live, released, past their
// retention), sorted (for the conformance suite).
func (s *Store) IdempotencyRecords(scope string) []string {
	v := s.Idempotency().(idemView)
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	var keys []string
	for id := range v.st.recs {
		if id.Scope == scope {
			keys = append(keys, id.Key)
		}
	}
	slices.Sort(keys)
	return keys
}

// SessionPresent reports whether the store still holds anything of the
// session record id, live or not: the record, or an entry of its user's
// index (for the conformance suite).
func (s *Store) SessionPresent(id session.ID) bool {
	st := s.sessionState()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.recs[id] != nil {
		return true
	}
	for _, idx := range st.users {
		if _, ok := idx[id]; ok {
			return true
		}
	}
	return false
}

// ScheduleStored returns the slot IDs of job's records, ledger entries and
// records with an attempt history, each sorted (for the conformance
// suite).
func (s *Store) ScheduleStored(job string) (slots, ledger, attempts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sched()
	slots, ledger, attempts = []string{}, []string{}, []string{}
	for id, r := range st.recs[job] {
		slots = append(slots, id)
		if len(r.History) > 0 {
			attempts = append(attempts, id)
		}
	}
	for id := range st.ledger[job] {
		ledger = append(ledger, id)
	}
	slices.Sort(slots)
	slices.Sort(ledger)
	slices.Sort(attempts)
	return slots, ledger, attempts
}
