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
	now := s.now().UnixMicro()
	out := map[string]time.Duration{}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, head := range sh.m {
			for sl := head; sl != nil; sl = sl.next {
				if sl.st.Expires > now {
					k := ratelimit.StateKey{Group: sl.group, Name: sl.name, Kind: sl.kind, Key: sl.key}
					out[k.String()] = time.Duration(sl.st.Expires-now) * time.Microsecond
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// RateLimitEntries counts the rate limit entries the store holds, expired
// ones included, and checks that its map and its expiry heap agree.
func (s *Store) RateLimitEntries() (int, error) {
	l := s.Limits().(*limits)
	total := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n := 0
		for h, head := range sh.m {
			for sl := head; sl != nil; sl = sl.next {
				if sl.hash != h || l.hash(sl.key) != h || &l.shards[h&l.mask] != sh ||
					sl.idx < 0 || sl.idx >= len(sh.h) || sh.h[sl.idx] != sl || sl.at > sl.st.Expires {
					sh.mu.Unlock()
					return 0, fmt.Errorf("slot of %q out of place", sl.key)
				}
				n++
			}
		}
		if n != len(sh.h) {
			sh.mu.Unlock()
			return 0, fmt.Errorf("%d slots in the map of shard %d, %d in its heap", n, i, len(sh.h))
		}
		sh.mu.Unlock()
		total += n
	}
	if c := l.n.Load(); c != int64(total) {
		return 0, fmt.Errorf("%d slots held, %d counted", total, c)
	}
	return total, nil
}
