package ratelimit

import (
	"context"
	"sync"
	"time"
)

// localStore is an in-process Store on the process's clock: the local
// limiter of the middleware's FailLocal policy. It runs the reference
// engine on a map; expired state is dropped when touched and by a small
// sweep every few hundred writes.
type localStore struct {
	now    func() time.Time
	mu     sync.Mutex
	m      map[StateKey]*State
	writes int
}

func newLocalStore(now func() time.Time) *localStore {
	return &localStore{now: now, m: map[StateKey]*State{}}
}

func (l *localStore) get(key StateKey, now int64) *State {
	st := l.m[key]
	if st != nil && st.Expires <= now {
		delete(l.m, key)
		return nil
	}
	return st
}

func (l *localStore) put(key StateKey, st *State, now int64) {
	if st == nil || st.Expires <= now {
		delete(l.m, key)
	} else {
		l.m[key] = st
	}
	if l.writes++; l.writes%256 == 0 {
		n := 0
		for k, v := range l.m {
			if v.Expires <= now {
				delete(l.m, k)
			}
			if n++; n >= 64 {
				break
			}
		}
	}
}

func (l *localStore) Decide(ctx context.Context, reqs []Request, commit bool) ([]Decision, error) {
	if err := ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	us := now.UnixMicro()
	states := make([]*State, len(reqs))
	for i, r := range reqs {
		states[i] = l.get(r.Key, us)
	}
	ds, next := Evaluate(now, reqs, states, commit)
	for i, st := range next {
		l.put(reqs[i].Key, st, us)
	}
	return ds, nil
}

func (l *localStore) Reset(ctx context.Context, keys []StateKey) error {
	if err := ValidateStateKeys(keys); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.m, k)
	}
	return nil
}

func (l *localStore) AcquirePermit(ctx context.Context, key StateKey, id string, permits int, ttl time.Duration) (PermitGrant, error) {
	if err := ValidatePermit(key, id, permits, ttl); err != nil {
		return PermitGrant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	g, st := EvaluateAcquire(now, l.get(key, now.UnixMicro()), id, permits, ttl)
	l.put(key, st, now.UnixMicro())
	return g, nil
}

func (l *localStore) RenewPermit(ctx context.Context, key StateKey, id string, ttl time.Duration) (PermitGrant, error) {
	if err := ValidatePermit(key, id, -1, ttl); err != nil {
		return PermitGrant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	g, st, err := EvaluateRenew(now, l.get(key, now.UnixMicro()), id, ttl)
	if err != nil {
		return g, err
	}
	l.put(key, st, now.UnixMicro())
	return g, nil
}

func (l *localStore) ReleasePermit(ctx context.Context, key StateKey, id string) error {
	if err := ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	st, err := EvaluateRelease(now, l.get(key, now.UnixMicro()), id)
	if err != nil {
		return err
	}
	l.put(key, st, now.UnixMicro())
	return nil
}
