package pgstore

// IdempotencyStatements returns the SQL of the Store's idempotency
// statements, so tests can prepare them on connections ahead of a fault.
func IdempotencyStatements(s *Store) []string {
	q := s.idemQueries()
	return []string{q.begin, q.renew, q.complete, q.release, q.inspect}
}
