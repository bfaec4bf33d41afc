package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// Limits returns the store's ratelimit.Store view: the reference
// implementation of the rate limit algorithms ([ratelimit.Evaluate]) on a
// map, judged on the store's clock. Expired state counts as absent; it is
// reused by its key's next decision, or deleted by a sweep that runs every
// few hundred writes (once it expired more than a second ago).
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		return &limits{s: s, m: map[string]*slot{}}
	}).(*limits)
}

// sweepEvery is how many writes pass between two sweeps; sweepBatch is how
// many keys a sweep looks at; state is deleted once it expired sweepGrace
// ago.
const (
	sweepEvery = 256
	sweepBatch = 64
	sweepGrace = int64(time.Second / time.Microsecond)
)

type limits struct {
	s      *Store
	mu     sync.Mutex
	m      map[string]*slot // by the caller's key: the limits holding state for it
	writes int
}

// slot is the state of one limit for one caller's key; the slots of a key
// form a list (a key is usually under one or two limits), so a lookup
// hashes only the key.
type slot struct {
	group, name, kind string
	st                *ratelimit.State
	next              *slot
}

// find returns k's slot (nil if none).
func (l *limits) find(k ratelimit.StateKey) *slot {
	for sl := l.m[k.Key]; sl != nil; sl = sl.next {
		if sl.name == k.Name && sl.kind == k.Kind && sl.group == k.Group {
			return sl
		}
	}
	return nil
}

// raw returns k's state, also when it expired (nil if none).
func (l *limits) raw(k ratelimit.StateKey) *ratelimit.State {
	if sl := l.find(k); sl != nil {
		return sl.st
	}
	return nil
}

// get returns the live state of k (nil if none).
func (l *limits) get(k ratelimit.StateKey, now int64) *ratelimit.State {
	st := l.raw(k)
	if st != nil && st.Expires <= now {
		return nil
	}
	return st
}

// set stores st under k (deletes k's slot when st is nil).
func (l *limits) set(k ratelimit.StateKey, st *ratelimit.State) {
	head := l.m[k.Key]
	var prev *slot
	for sl := head; sl != nil; prev, sl = sl, sl.next {
		if sl.name != k.Name || sl.kind != k.Kind || sl.group != k.Group {
			continue
		}
		switch {
		case st != nil:
			sl.st = st
		case prev != nil:
			prev.next = sl.next
		case sl.next != nil:
			l.m[k.Key] = sl.next
		default:
			delete(l.m, k.Key)
		}
		return
	}
	if st != nil {
		l.m[k.Key] = &slot{group: k.Group, name: k.Name, kind: k.Kind, st: st, next: head}
	}
}

// put stores st under k (deletes it when nil or expired) and counts the
// write.
func (l *limits) put(k ratelimit.StateKey, st *ratelimit.State, now int64) {
	if st != nil && st.Expires <= now {
		st = nil
	}
	if st == nil || l.raw(k) != st {
		l.set(k, st)
	}
	l.wrote(now)
}

// wrote counts a write and runs a sweep every sweepEvery writes. State
// that expired only just now is left for reuse by its key's next decision;
// older expired state is deleted.
func (l *limits) wrote(now int64) {
	l.writes++
	if l.writes%sweepEvery != 0 {
		return
	}
	n, old := 0, now-sweepGrace
	for key, head := range l.m {
		first := head
		var prev *slot
		for sl := head; sl != nil; sl = sl.next {
			if sl.st.Expires > old {
				prev = sl
				continue
			}
			if prev == nil {
				first = sl.next
			} else {
				prev.next = sl.next
			}
		}
		switch {
		case first == nil:
			delete(l.m, key)
		case first != head:
			l.m[key] = first
		}
		if n++; n >= sweepBatch {
			break
		}
	}
}

func (l *limits) Decide(ctx context.Context, reqs []ratelimit.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := ratelimit.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.now()
	us := now.UnixMicro()
	states := make([]*ratelimit.State, len(reqs))
	for i, r := range reqs {
		states[i] = l.get(r.Key, us)
	}
	ds, next := ratelimit.Evaluate(now, reqs, states, commit)
	for i, st := range next {
		l.put(reqs[i].Key, st, us)
	}
	return ds, nil
}

// DecideOne is Decide for one request, without allocating when the key
// has state already.
func (l *limits) DecideOne(ctx context.Context, r ratelimit.Request, commit bool) (ratelimit.Decision, error) {
	if err := ratelimit.ValidateRequest(&r, commit); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.now()
	us := now.UnixMicro()
	// An expired state is passed on too: the engine treats it as absent and
	// reuses it for the next state.
	sl := l.find(r.Key)
	var st *ratelimit.State
	if sl != nil {
		st = sl.st
	}
	d, next := ratelimit.EvaluateOne(now, &r, st, commit)
	if next != nil {
		if sl == nil {
			l.set(r.Key, next)
		} else if next != st {
			sl.st = next
		}
		l.wrote(us)
	}
	return d, nil
}

func (l *limits) Reset(ctx context.Context, keys []ratelimit.StateKey) error {
	if err := ratelimit.ValidateStateKeys(keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.set(k, nil)
	}
	return nil
}

func (l *limits) AcquirePermit(ctx context.Context, key ratelimit.StateKey, id string, permits int, ttl time.Duration) (ratelimit.PermitGrant, error) {
	if err := ratelimit.ValidatePermit(key, id, permits, ttl); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.now()
	us := now.UnixMicro()
	g, st := ratelimit.EvaluateAcquire(now, l.get(key, us), id, permits, ttl)
	l.put(key, st, us)
	return g, nil
}

func (l *limits) RenewPermit(ctx context.Context, key ratelimit.StateKey, id string, ttl time.Duration) (ratelimit.PermitGrant, error) {
	if err := ratelimit.ValidatePermit(key, id, -1, ttl); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.s.now()
	us := now.UnixMicro()
	g, st, err := ratelimit.EvaluateRenew(now, l.get(key, us), id, ttl)
	if err != nil {
		return g, err
	}
	l.put(key, st, us)
	return g, nil
}

func (l *limits) ReleasePermit(ctx context.Context, key ratelimit.StateKey, id string) error {
	if err := ratelimit.ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	us := l.s.now().UnixMicro()
	st, err := ratelimit.EvaluateRelease(time.UnixMicro(us), l.get(key, us), id)
	if err != nil {
		return err
	}
	l.put(key, st, us)
	return nil
}

// LimitTTL reports whether the store holds rate limit state under k (see
// ratelimit.Limiter.StateKey) and how long until it expires on the store's
// clock.
func (s *Store) LimitTTL(ctx context.Context, k ratelimit.StateKey) (time.Duration, bool, error) {
	if err := ratelimit.ValidateStateKeys([]ratelimit.StateKey{k}); err != nil {
		return 0, false, err
	}
	l := s.Limits().(*limits)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.now().UnixMicro()
	st := l.get(k, now)
	if st == nil {
		return 0, false, nil
	}
	return time.Duration(st.Expires-now) * time.Microsecond, true, nil
}
