package redisstore

import "github.com/tenurekit/tenure/idempotency"

// IdempotencyKey exposes the key of a record to the tests.
func IdempotencyKey(s *Store, id idempotency.ID) string { return s.idemKey(id) }
