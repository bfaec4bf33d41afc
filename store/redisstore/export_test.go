package redisstore

import "context"

// LeaseKeys exposes the lock and fence keys of a lease to the tests.
func (s *Store) LeaseKeys(key string) (lock, fence string) { return s.leaseKeys(key) }

// ValueKeys exposes the value and admitted-fence keys of a resource to the
// tests.
func (s *Store) ValueKeys(resource string) (value, admitted string) { return s.valueKeys(resource) }

// RevokeBegin runs only the first step of a revoke-all, as a revoke that
// dies before its second step would.
func (s *Store) RevokeBegin(ctx context.Context, userID string) error {
	keys := []string{s.SessionIndexKey(userID), s.SessionRevokeKey(userID)}
	return sessionRevokeBegin.Exec(ctx, s.c, keys, []string{"interrupted"}).Error()
}

// SetShortConfirmHook makes s run fn when one of its writes' confirmation
// came back short or was lost, before it asks the primary about its
// replicas. Set it before the store writes.
func (s *Store) SetShortConfirmHook(fn func()) { s.testHookShortConfirm = fn }

// KeyPrefix exposes the store's key prefix, escaped as in its keys.
func (s *Store) KeyPrefix() string { return s.prefix }

// SchedTag exposes the key prefix of everything a job keeps.
func (s *Store) SchedTag(job string) string { return s.schedTag(job) }
