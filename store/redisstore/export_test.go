package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

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

// EndWakes ends the store's subscriptions as the end of its process
// would: its watchers stay, and hear nothing more. It waits until the
// server shows none of the store's hand-over channels subscribed.
func (s *Store) EndWakes(t *testing.T) {
	t.Helper()
	h := &s.wakes
	h.mu.Lock()
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	var grants []string
	for ch, sub := range subs {
		<-sub.ready
		if sub.linger != nil {
			sub.linger.Stop()
		}
		if sub.stop != nil {
			sub.stop()
		}
		grants = append(grants, s.grantChannel(ch))
	}
	if len(grants) == 0 {
		t.Fatal("EndWakes: the store is subscribed to no hand-over channel")
	}
	sub := "NUMSUB"
	if s.cluster {
		sub = "SHARDNUMSUB"
	}
	ctx := context.Background()
	for _, ch := range grants {
		for deadline := time.Now().Add(30 * time.Second); ; {
			arr, err := s.c.Do(ctx, rclient.Cmd{Name: "PUBSUB", Keys: []string{ch}, Pre: []string{sub}}).ToArray()
			if err != nil || len(arr) != 2 {
				t.Fatalf("PUBSUB %s %s: %v", sub, ch, err)
			}
			if n, err := arr[1].AsInt64(); err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the store's hand-over channel %s is still subscribed", ch)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
