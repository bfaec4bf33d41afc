package memstore

import (
	"fmt"
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

// RateLimitEntries counts the rate limit entries the store holds, expired
// ones included, and checks that its map and its expiry heap agree.
func (s *Store) RateLimitEntries() (int, error) {
	l := s.Limits().(*limits)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for key, head := range l.m {
		for sl := head; sl != nil; sl = sl.next {
			if sl.key != key || sl.idx < 0 || sl.idx >= len(l.h) || l.h[sl.idx] != sl || sl.at > sl.st.Expires {
				return 0, fmt.Errorf("slot of %q out of place", key)
			}
			n++
		}
	}
	if n != len(l.h) {
		return 0, fmt.Errorf("%d slots in the map, %d in the heap", n, len(l.h))
	}
	return n, nil
}
