package memstore

import (
	"slices"
	"strings"
	"time"
)

// RateLimitKeys lists the rate limit state held by the store (for the
// conformance suite): each key and its time left on the store's clock,
// leaving out state that already expired.
func (s *Store) RateLimitKeys() map[string]time.Duration { return s.limits().Keys() }

// RateLimitEntries counts the rate limit entries the store holds, expired
// ones included, and checks that its map and its expiry heap agree.
func (s *Store) RateLimitEntries() (int, error) { return s.limits().Entries() }

// QueuedKeys counts the keys with a queue of waiters the store keeps.
func (s *Store) QueuedKeys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues)
}

// LeaseKeys returns the keys beginning with prefix that have a lease record
// or a queue of waiters, sorted.
func (s *Store) LeaseKeys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.leases {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	for k := range s.queues {
		if _, ok := s.leases[k]; !ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// SetFence sets the fence of key's record to f.
func (s *Store) SetFence(key string, f uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases[key].fence = f
}
