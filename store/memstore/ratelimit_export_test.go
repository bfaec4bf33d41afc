package memstore

import "time"

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
