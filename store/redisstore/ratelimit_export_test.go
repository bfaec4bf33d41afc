package redisstore

import "github.com/tenurekit/tenure/ratelimit/driver"

// RateKey exposes the Redis key of a rate limit state key to the tests.
func (s *Store) RateKey(k driver.StateKey) string { return s.rateKey(k) }
