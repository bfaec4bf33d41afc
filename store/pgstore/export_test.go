package pgstore

// Statements returns the SQL of the Store's lease statements, so tests can
// prepare them on connections ahead of a fault.
func Statements(s *Store) []string {
	return []string{s.q.acquire, s.q.renew, s.q.release, s.q.inspect}
}

// ListenLockClass is the first key of the advisory lock a listening
// connection holds.
const ListenLockClass = listenLockClass
