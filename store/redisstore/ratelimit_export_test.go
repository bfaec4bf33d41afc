package redisstore

import "github.com/tenurekit/tenure/ratelimit"

// RateKey exposes the Redis key of a rate limit state key to the tests.
func (s *Store) RateKey(k ratelimit.StateKey) string { return s.rateKey(k) }
