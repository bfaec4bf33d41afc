package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// waitQueue is the waiters of one key in arrival order
// (leasedriver.Queuer).
type waitQueue []waiter

type waiter struct {
	token string
	until time.Time // the end of its stay
}

// live drops the waiters whose stay has ended.
func (q waitQueue) live(now time.Time) waitQueue {
	return slices.DeleteFunc(q, func(w waiter) bool { return !w.until.After(now) })
}

func (q waitQueue) index(token string) int {
	return slices.IndexFunc(q, func(w waiter) bool { return w.token == token })
}

// queue returns key's live waiters, dropping the queue when none is left.
// s.mu is held.
func (s *Store) queue(key string, now time.Time) waitQueue {
	q := s.queues[key].live(now)
	if len(q) == 0 {
		delete(s.queues, key)
		return nil
	}
	s.queues[key] = q
	return q
}

// dequeue removes token from key's queue. s.mu is held.
func (s *Store) dequeue(key, token string, now time.Time) {
	q := s.queue(key, now)
	if i := q.index(token); i >= 0 {
		q = slices.Delete(q, i, i+1)
		if len(q) == 0 {
			delete(s.queues, key)
		} else {
			s.queues[key] = q
		}
	}
}

// AcquireQueued is AcquireHolder for a waiter that keeps its place in
// key's queue for stay (leasedriver.Queuer): a free key goes to the first
// live waiter, never to a newcomer.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	if err := leasedriver.ValidateQueued(key, token, ttl, holder, stay); err != nil {
		return lease.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquire(key, token, ttl, holder, stay)
}

// Leave gives token's place in key's queue up (leasedriver.Queuer). A
// waiter that was first leaves the key free for the next: the watchers
// are woken.
func (v leases) Leave(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateLeave(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	first := s.queue(key, now).index(token) == 0
	s.dequeue(key, token, now)
	if first {
		s.wake(key, now)
	}
	return nil
}

// Watch returns a channel that receives when key is released or a waiter
// first in its queue leaves (leasedriver.Waker), naming the waiter that
// is first now. An expiry sends nothing: a waiter polls at the holder's
// remaining TTL.
func (v leases) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch, stop := v.s.watchers.Watch(key, waiter)
	return ch, stop, nil
}

// wake tells key's watchers it may be free, naming its first live waiter
// ("" when none waits). s.mu is held.
func (s *Store) wake(key string, now time.Time) {
	who := ""
	if q := s.queue(key, now); len(q) > 0 {
		who = leasedriver.WaiterID(q[0].token)
	}
	s.watchers.Wake(key, who)
}
