package sqlitestore

import (
	"context"
	"time"
)

// RateLimitKeys lists the live rate limit rows with their time left on the
// store's clock (for the conformance suite).
func (s *Store) RateLimitKeys(ctx context.Context) (map[string]time.Duration, error) {
	return s.Limits().(*rateLimits).rateLimitKeys(ctx)
}

// RateLimitTable is the name of the store's rate limit table.
func (s *Store) RateLimitTable() string { return `"` + s.q.prefix + `ratelimit"` }

// WriteWaiters returns how many writers wait in the queue of the store's
// database file (for the queue tests).
func (s *Store) WriteWaiters() int {
	s.wq.mu.Lock()
	defer s.wq.mu.Unlock()
	n := 0
	for _, w := range s.wq.lanes {
		n += len(w)
	}
	return n
}
