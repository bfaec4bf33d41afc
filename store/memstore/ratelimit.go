package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// Limits returns the store's ratelimit.Store view: the reference
// implementation of the rate limit algorithms ([ratelimit.Evaluate]) on a
// map, judged on the store's clock. Expired state is dropped when it is
// next touched and by a sweep that runs every few hundred writes.
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		return &limits{s: s, m: map[string]*ratelimit.State{}}
	}).(*limits)
}

// sweepEvery is how many writes pass between two sweeps; sweepBatch is how
// many entries a sweep looks at.
const (
	sweepEvery = 256
	sweepBatch = 64
)

type limits struct {
	s      *Store
	mu     sync.Mutex
	m      map[string]*ratelimit.State
	writes int
}

// get returns the live state of key (nil if none), dropping expired state.
func (l *limits) get(key string, now int64) *ratelimit.State {
	st := l.m[key]
	if st != nil && st.Expires <= now {
		delete(l.m, key)
		return nil
	}
	return st
}

// put stores st under key (deletes it when nil) and sweeps now and then.
func (l *limits) put(key string, st *ratelimit.State, now int64) {
	if st == nil || st.Expires <= now {
		delete(l.m, key)
	} else {
		l.m[key] = st
	}
	l.writes++
	if l.writes%sweepEvery != 0 {
		return
	}
	n := 0
	for k, v := range l.m {
		if v.Expires <= now {
			delete(l.m, k)
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
		states[i] = l.get(r.Key.String(), us)
	}
	ds, next := ratelimit.Evaluate(now, reqs, states, commit)
	for i, st := range next {
		l.put(reqs[i].Key.String(), st, us)
	}
	return ds, nil
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
		delete(l.m, k.String())
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
	g, st := ratelimit.EvaluateAcquire(now, l.get(key.String(), us), id, permits, ttl)
	l.put(key.String(), st, us)
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
	g, st, err := ratelimit.EvaluateRenew(now, l.get(key.String(), us), id, ttl)
	if err != nil {
		return g, err
	}
	l.put(key.String(), st, us)
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
	st, err := ratelimit.EvaluateRelease(time.UnixMicro(us), l.get(key.String(), us), id)
	if err != nil {
		return err
	}
	l.put(key.String(), st, us)
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
	st := l.get(k.String(), now)
	if st == nil {
		return 0, false, nil
	}
	return time.Duration(st.Expires-now) * time.Microsecond, true, nil
}
