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
