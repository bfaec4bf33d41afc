package pgstore

// RateStatements returns the SQL of the Store's rate limit statements, so
// tests can prepare them on connections ahead of a fault.
func RateStatements(s *Store) []string {
	l := s.Limits().(*rateLimits)
	return []string{l.q.decide, l.q.permit, l.q.reset}
}
