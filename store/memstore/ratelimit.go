package memstore

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// Limits returns the store's ratelimit.Store view: the reference
// implementation of the rate limit algorithms ([ratelimit.Evaluate]) on a
// map, judged on the store's clock. Expired state counts as absent; it is
// reused by its key's next decision, or deleted once it expired more than
// a second ago: every write also looks at up to four of the entries that
// expire soonest, so expired state is released at least as fast as new
// keys create it.
//
// The view holds at most Options.LimitKeys entries (one per key and limit;
// default DefaultLimitKeys). When it is full, a decision that would create
// an entry first deletes the entry that expires soonest if that one has
// expired; if none has, the decision is refused as if the limit were used
// up: Allowed false, Remaining 0, and RetryAfter until the soonest entry
// expires (a permit is not granted, with the same RetryAfter). Keys that
// already hold state are never refused for want of room, so a full store
// never admits more than a limit allows.
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		return &limits{s: s, m: map[string]*slot{}, max: s.limitKeys}
	}).(*limits)
}

// DefaultLimitKeys is the default of Options.LimitKeys.
const DefaultLimitKeys = 1 << 20

// sweepOps is how many of the soonest-expiring entries a write looks at;
// state is deleted once it expired sweepGrace ago; roomOps bounds how many
// entries a decision that needs room looks at.
const (
	sweepOps   = 4
	sweepGrace = int64(time.Second / time.Microsecond)
	roomOps    = 16
)

type limits struct {
	s   *Store
	mu  sync.Mutex
	m   map[string]*slot // by the caller's key: the limits holding state for it
	h   expiryHeap       // every slot, soonest expiry first
	max int
}

// slot is the state of one limit for one caller's key; the slots of a key
// form a list (a key is usually under one or two limits), so a lookup
// hashes only the key.
type slot struct {
	key, group, name, kind string
	st                     *ratelimit.State
	next                   *slot
	// at is the slot's place in h: at most st.Expires (it is brought up to
	// date when the slot reaches the top of h), and idx its index there.
	at  int64
	idx int
}

// expiryHeap is a min-heap of slots by at (container/heap).
type expiryHeap []*slot

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *expiryHeap) Push(x any) {
	sl := x.(*slot)
	sl.idx = len(*h)
	*h = append(*h, sl)
}
func (h *expiryHeap) Pop() any {
	old := *h
	sl := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return sl
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

// get returns the live state of k (nil if none).
func (l *limits) get(k ratelimit.StateKey, now int64) *ratelimit.State {
	if sl := l.find(k); sl != nil && sl.st.Expires > now {
		return sl.st
	}
	return nil
}

// stored keeps sl's place in the heap at most its state's expiry, after
// its state changed.
func (l *limits) stored(sl *slot) {
	if sl.st.Expires < sl.at {
		sl.at = sl.st.Expires
		heap.Fix(&l.h, sl.idx)
	}
}

// set stores st under k (deletes k's slot when st is nil).
func (l *limits) set(k ratelimit.StateKey, st *ratelimit.State) {
	if sl := l.find(k); sl != nil {
		if st == nil {
			l.remove(sl)
		} else {
			sl.st = st
			l.stored(sl)
		}
		return
	}
	if st != nil {
		sl := &slot{key: k.Key, group: k.Group, name: k.Name, kind: k.Kind, st: st, next: l.m[k.Key], at: st.Expires}
		l.m[k.Key] = sl
		heap.Push(&l.h, sl)
	}
}

// remove deletes sl from its key's list and from the heap.
func (l *limits) remove(sl *slot) {
	head := l.m[sl.key]
	if head == sl {
		if sl.next == nil {
			delete(l.m, sl.key)
		} else {
			l.m[sl.key] = sl.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == sl {
				p.next = sl.next
				break
			}
		}
	}
	heap.Remove(&l.h, sl.idx)
	sl.next = nil
}

// put stores st under k (deletes it when nil or expired) and counts the
// write.
func (l *limits) put(k ratelimit.StateKey, st *ratelimit.State, now int64) {
	if st != nil && st.Expires <= now {
		st = nil
	}
	l.set(k, st)
	l.wrote(now)
}

// wrote runs after every write: it looks at up to sweepOps of the entries
// that expire soonest, deleting those that expired sweepGrace ago (state
// that expired only just now is left for reuse by its key's next
// decision) and moving the others to their current expiry.
func (l *limits) wrote(now int64) {
	old := now - sweepGrace
	for range sweepOps {
		if len(l.h) == 0 || l.h[0].at > old {
			return
		}
		sl := l.h[0]
		if sl.st.Expires > old {
			sl.at = sl.st.Expires
			heap.Fix(&l.h, 0)
			continue
		}
		l.remove(sl)
	}
}

// room reports whether n more entries fit, deleting expired ones (the
// soonest first) to make room; when they do not, it also returns how long
// until the soonest entry expires.
func (l *limits) room(n int, now int64) (bool, time.Duration) {
	for range roomOps {
		if len(l.h)+n <= l.max {
			return true, 0
		}
		sl := l.h[0]
		switch {
		case sl.st.Expires <= now:
			l.remove(sl)
		case sl.at < sl.st.Expires:
			sl.at = sl.st.Expires
			heap.Fix(&l.h, 0)
		default:
			return false, time.Duration(sl.st.Expires-now) * time.Microsecond
		}
	}
	if len(l.h)+n <= l.max {
		return true, 0
	}
	return false, time.Duration(max(l.h[0].at-now, 1)) * time.Microsecond
}

// full turns decisions into refusals for want of room: none is allowed,
// and each retries when the soonest entry expires (or later).
func full(ds []ratelimit.Decision, wait time.Duration) {
	for i := range ds {
		ds[i].Allowed, ds[i].Remaining = false, 0
		ds[i].RetryAfter = max(ds[i].RetryAfter, wait)
		ds[i].ResetAfter = max(ds[i].ResetAfter, ds[i].RetryAfter)
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
	fresh := 0 // keys without a slot
	for i, r := range reqs {
		sl := l.find(r.Key)
		if sl == nil {
			fresh++
		} else if sl.st.Expires > us {
			states[i] = sl.st
		}
	}
	if commit && fresh > 0 {
		if ok, wait := l.room(fresh, us); !ok {
			ds, _ := ratelimit.Evaluate(now, reqs, states, false)
			full(ds, wait)
			return ds, nil
		}
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
	} else if commit {
		if ok, wait := l.room(1, us); !ok {
			d, _ := ratelimit.EvaluateOne(now, &r, nil, false)
			ds := []ratelimit.Decision{d}
			full(ds, wait)
			return ds[0], nil
		}
	}
	d, next := ratelimit.EvaluateOne(now, &r, st, commit)
	if next != nil {
		if sl == nil {
			l.set(r.Key, next)
		} else {
			sl.st = next
			l.stored(sl)
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
	if l.find(key) == nil {
		if ok, wait := l.room(1, us); !ok {
			return ratelimit.PermitGrant{RetryAfter: wait, At: time.UnixMicro(us)}, nil
		}
	}
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
