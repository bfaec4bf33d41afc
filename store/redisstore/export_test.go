package redisstore

// LeaseKeys exposes the lock and fence keys of a lease to the tests.
func (s *Store) LeaseKeys(key string) (lock, fence string) { return s.leaseKeys(key) }

// ValueKeys exposes the value and admitted-fence keys of a resource to the
// tests.
func (s *Store) ValueKeys(resource string) (value, admitted string) { return s.valueKeys(resource) }
