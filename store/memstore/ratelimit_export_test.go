package memstore

import "time"

// RateLimitKeys lists the rate limit state held by the store (for the
// conformance suite): each key and its time left on the store's clock,
// leaving out state that already expired.
func (s *Store) RateLimitKeys() map[string]time.Duration {
	l := s.Limits().(*limits)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.now().UnixMicro()
	out := map[string]time.Duration{}
	for k, st := range l.m {
		if st.Expires > now {
			out[k] = time.Duration(st.Expires-now) * time.Microsecond
		}
	}
	return out
}
