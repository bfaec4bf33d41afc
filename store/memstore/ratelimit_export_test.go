package memstore

import (
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// RateLimitKeys lists the rate limit state held by the store (for the
// conformance suite): each key and its time left on the store's clock,
// leaving out state that already expired.
func (s *Store) RateLimitKeys() map[string]time.Duration {
	l := s.Limits().(*limits)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.now().UnixMicro()
	out := map[string]time.Duration{}
	for key, head := range l.m {
		for sl := head; sl != nil; sl = sl.next {
			if sl.st.Expires > now {
				k := ratelimit.StateKey{Group: sl.group, Name: sl.name, Kind: sl.kind, Key: key}
				out[k.String()] = time.Duration(sl.st.Expires-now) * time.Microsecond
			}
		}
	}
	return out
}
