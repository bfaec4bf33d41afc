package ratelimit

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// DefaultLocalMaxKeys is the default of MiddlewareOptions.LocalMaxKeys.
const DefaultLocalMaxKeys = 100_000

// localStore is an in-process Store on the process's clock: the local
// limiter of the middleware's FailLocal policy. It runs the reference
// engine on a map whose entries also sit in a heap by expiry: every write
// deletes up to localSweep expired entries (the soonest first), so expired
// state is released as fast as new keys create it, and at most max
// entries are held. When full and no entry has expired, a decision that
// needs a new entry is refused (denied until the soonest entry expires; a
// permit is not granted), so the local limiter never admits past a limit.
type localStore struct {
	now func() time.Time
	max int
	mu  sync.Mutex
	m   map[StateKey]*localEntry
	h   localHeap
}

// localEntry is the state of one key; at (at most st.Expires) is its place
// in the heap and idx its index there.
type localEntry struct {
	key StateKey
	st  *State
	at  int64
	idx int
}

// localSweep is how many of the soonest-expiring entries a write looks
// at; localRoomOps bounds how many a decision that needs room looks at.
const (
	localSweep   = 4
	localRoomOps = 16
)

// localHeap is a min-heap of entries by at (container/heap).
type localHeap []*localEntry

func (h localHeap) Len() int           { return len(h) }
func (h localHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h localHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *localHeap) Push(x any) {
	e := x.(*localEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *localHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

func newLocalStore(now func() time.Time, max int) *localStore {
	return &localStore{now: now, max: max, m: map[StateKey]*localEntry{}}
}

func (l *localStore) get(key StateKey, now int64) *State {
	if e := l.m[key]; e != nil && e.st.Expires > now {
		return e.st
	}
	return nil
}

func (l *localStore) remove(e *localEntry) {
	delete(l.m, e.key)
	heap.Remove(&l.h, e.idx)
}

func (l *localStore) put(key StateKey, st *State, now int64) {
	e := l.m[key]
	switch {
	case st == nil || st.Expires <= now:
		if e != nil {
			l.remove(e)
		}
	case e != nil:
		e.st = st
		if st.Expires < e.at {
			e.at = st.Expires
			heap.Fix(&l.h, e.idx)
		}
	default:
		e = &localEntry{key: key, st: st, at: st.Expires}
		l.m[key] = e
		heap.Push(&l.h, e)
	}
	for range localSweep {
		if len(l.h) == 0 || l.h[0].at > now {
			return
		}
		if e := l.h[0]; e.st.Expires > now {
			e.at = e.st.Expires
			heap.Fix(&l.h, 0)
		} else {
			l.remove(e)
		}
	}
}

// room reports whether n more entries fit, deleting expired ones (the
// soonest first) to make room; when they do not, it also returns how long
// until the soonest entry expires.
func (l *localStore) room(n int, now int64) (bool, time.Duration) {
	for range localRoomOps {
		if len(l.h)+n <= l.max {
			return true, 0
		}
		e := l.h[0]
		switch {
		case e.st.Expires <= now:
			l.remove(e)
		case e.at < e.st.Expires:
			e.at = e.st.Expires
			heap.Fix(&l.h, 0)
		default:
			return false, micros(e.st.Expires - now)
		}
	}
	if len(l.h)+n <= l.max {
		return true, 0
	}
	return false, micros(max(l.h[0].at-now, 1))
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
	fresh := 0
	for i, r := range reqs {
		if l.m[r.Key] == nil {
			fresh++
		}
		states[i] = l.get(r.Key, us)
	}
	if commit && fresh > 0 {
		if ok, wait := l.room(fresh, us); !ok {
			ds, _ := Evaluate(now, reqs, states, false)
			for i := range ds {
				ds[i].Allowed, ds[i].Remaining = false, 0
				ds[i].RetryAfter = max(ds[i].RetryAfter, wait)
				ds[i].ResetAfter = max(ds[i].ResetAfter, ds[i].RetryAfter)
			}
			return ds, nil
		}
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
		if e := l.m[k]; e != nil {
			l.remove(e)
		}
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
	us := now.UnixMicro()
	if l.m[key] == nil {
		if ok, wait := l.room(1, us); !ok {
			return PermitGrant{RetryAfter: wait, At: time.UnixMicro(us)}, nil
		}
	}
	g, st := EvaluateAcquire(now, l.get(key, us), id, permits, ttl)
	l.put(key, st, us)
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

// entries returns how many entries l holds, expired ones included.
func (l *localStore) entries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
