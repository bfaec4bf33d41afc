// Package limitmem is tenure's in-process rate limit engine: the state of
// rate limits and concurrency permits in a map, judged by the reference
// implementation of the algorithms (driver.Evaluate) on a clock of the
// process. memstore keeps its rate limit state in it, and the ratelimit
// middleware's local limiter (FailLocal) is one.
//
// The map is split into parts (up to 64, each with its own lock, chosen by
// a hash of the caller's key), so that decisions on different keys rarely
// wait for each other; a decision that checks several limits together
// locks every part its keys fall in, so it is still one atomic step. The
// clock is read under the locks, so the decisions on a key see time move
// forward in the order they are applied.
//
// Every entry also sits in its part's heap by expiry: every write looks at
// up to four of the entries that expire soonest in its own part and four
// in another (taken in turn), deleting those that expired Grace ago, so
// expired state is released at least as fast as new keys create it.
//
// At most MaxKeys entries are held. When the map is full, a decision that
// would create an entry first deletes entries that have expired, the
// soonest first; if none has, the decision is refused as if the limit were
// used up: Allowed false, Remaining 0, and RetryAfter until the soonest
// entry expires (a permit is not granted, with the same RetryAfter). Keys
// that already hold state are never refused for want of room, so a full
// engine never admits more than a limit allows.
package limitmem

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Options configure an Engine.
type Options struct {
	// Now is the engine's clock. Default (nil): the process's wall clock,
	// read as wallClock does.
	Now func() time.Time
	// MaxKeys is the most entries held (one per key and limit). Default
	// (0) 1<<20.
	MaxKeys int
	// Name is the store name the engine reports to instrumentation
	// (ObsName), e.g. "memstore".
	Name string
	// Grace is how long after it expired an entry is kept for its key's
	// next decision to reuse before sweeps delete it. Default 0.
	Grace time.Duration
}

// Engine is an in-process driver.Store (and driver.OneDecider). It is safe
// for concurrent use.
type Engine struct {
	name   string
	now    func() time.Time
	grace  int64 // µs
	max    int64
	n      atomic.Int64 // entries held (and reserved) in all shards
	seed   maphash.Seed
	mask   uint64
	shards []shard
}

// New returns an empty engine.
func New(o Options) *Engine {
	if o.Now == nil {
		o.Now = new(wallClock).now
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1 << 20
	}
	n := 1
	for n < maxShards && n*shardKeys*2 <= o.MaxKeys {
		n *= 2
	}
	l := &Engine{name: o.Name, now: o.Now, grace: int64(o.Grace / time.Microsecond), max: int64(o.MaxKeys),
		seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n)}
	for i := range l.shards {
		l.shards[i].m = map[uint64]*slot{}
		l.shards[i].top.Store(math.MaxInt64)
		l.shards[i].self = uint64(i)
	}
	return l
}

// sweepOps is how many of the soonest-expiring entries a write looks at
// (in its own part and in one other); roomOps bounds how many entries of
// one part a decision that needs room looks at.
const (
	sweepOps = 4
	roomOps  = 16
)

// maxShards is the most parts the map is split into; a part is made for
// every shardKeys entries of Options.MaxKeys (so small stores have one).
const (
	maxShards = 64
	shardKeys = 4096
)

// shard is one part of the map, under its own lock.
type shard struct {
	mu sync.Mutex
	m  map[uint64]*slot // by the hash of the caller's key: the limits holding state for keys with that hash
	h  expiryHeap       // the shard's slots, soonest expiry first
	// top is h[0].at (math.MaxInt64 when h is empty) as of the shard's
	// last write: a hint that lets other shards' writes skip sweeping it
	// without taking its lock.
	top atomic.Int64
	// turn counts the shard's writes: each also sweeps the shard turn
	// places after it (skipping itself), so every shard takes its turn
	// without a counter that all cores write.
	turn uint64
	self uint64   // the shard's index
	_    [64]byte // keeps shards' locks on their own cache lines
}

// slot is the state of one limit for one caller's key; the slots of a hash
// form a list (a key is usually under one or two limits), so a lookup
// hashes only the key, once.
type slot struct {
	key, group, name, kind string
	hash                   uint64
	st                     driver.State // in the slot: one pointer less to follow
	next                   *slot
	// at is the slot's place in h: at most st.Expires (it is brought up to
	// date when the slot reaches the top of h), and idx its index there.
	at  int64
	idx int
}

// expiryHeap is a min-heap of slots by at, each slot knowing its index
// (the algorithms of container/heap, without its interface calls).
type expiryHeap []*slot

func (h expiryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h expiryHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if i == j || h[i].at <= h[j].at {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down moves h[i0] down; it reports whether it moved.
func (h expiryHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			break
		}
		if r := j + 1; r < n && h[r].at < h[j].at {
			j = r
		}
		if h[j].at >= h[i].at {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// push adds sl.
func (h *expiryHeap) push(sl *slot) {
	sl.idx = len(*h)
	*h = append(*h, sl)
	h.up(sl.idx)
}

// fix restores the order after h[i].at changed.
func (h expiryHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// remove deletes h[i].
func (h *expiryHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	if n != i {
		old.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if n != i {
		h.fix(i)
	}
}

// wallClock reads the process's wall clock with one clock read instead of
// time.Now's two: it takes time.Now at most every clockRebase and advances
// it by the monotonic clock in between. It differs from time.Now by the
// drift of the wall clock against the monotonic one over clockRebase
// (under a microsecond while NTP slews the wall clock; decisions are in
// whole microseconds), and follows a step of the wall clock within
// clockRebase.
type wallClock struct{ base atomic.Pointer[time.Time] }

const clockRebase = time.Millisecond

func (c *wallClock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if el := time.Since(*b); el >= 0 && el < clockRebase {
			return b.Add(el)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}

// ObsName returns Options.Name, the store name in telemetry.
func (l *Engine) ObsName() string { return l.name }

// hash returns the hash of the caller's key.
func (l *Engine) hash(key string) uint64 { return maphash.String(l.seed, key) }

// shardOf returns the shard of a key's hash.
func (l *Engine) shardOf(h uint64) *shard { return &l.shards[h&l.mask] }

// find returns k's slot (nil if none); h is the hash of k.Key.
func (sh *shard) find(k *driver.StateKey, h uint64) *slot {
	for sl := sh.m[h]; sl != nil; sl = sl.next {
		if sl.key == k.Key && sl.name == k.Name && sl.kind == k.Kind && sl.group == k.Group {
			return sl
		}
	}
	return nil
}

// get returns the live state of k (nil if none).
func (sh *shard) get(k *driver.StateKey, h uint64, now int64) *driver.State {
	if sl := sh.find(k, h); sl != nil && sl.st.Expires > now {
		return &sl.st
	}
	return nil
}

// stored keeps sl's place in the heap at most its state's expiry, after
// its state changed.
func (sh *shard) stored(sl *slot) {
	if sl.st.Expires < sl.at {
		sl.at = sl.st.Expires
		sh.h.fix(sl.idx)
	}
}

// set stores st under k (deletes k's slot when st is nil). A new slot
// takes one entry that the caller reserved (see reserve); l.n counts it
// already.
func (l *Engine) set(sh *shard, k *driver.StateKey, h uint64, st *driver.State) {
	if sl := sh.find(k, h); sl != nil {
		if st == nil {
			l.remove(sh, sl)
		} else {
			sl.st = *st
			sh.stored(sl)
		}
		return
	}
	if st != nil {
		sl := &slot{key: k.Key, group: k.Group, name: k.Name, kind: k.Kind, hash: h, st: *st, next: sh.m[h], at: st.Expires}
		sh.m[h] = sl
		sh.h.push(sl)
	}
}

// remove deletes sl from its hash's list and from the heap.
func (l *Engine) remove(sh *shard, sl *slot) {
	head := sh.m[sl.hash]
	if head == sl {
		if sl.next == nil {
			delete(sh.m, sl.hash)
		} else {
			sh.m[sl.hash] = sl.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == sl {
				p.next = sl.next
				break
			}
		}
	}
	sh.h.remove(sl.idx)
	sl.next = nil
	l.n.Add(-1)
}

// reserve takes n entries of room if they fit within max.
func (l *Engine) reserve(n int64) bool {
	for {
		c := l.n.Load()
		if c+n > l.max {
			return false
		}
		if l.n.CompareAndSwap(c, c+n) {
			return true
		}
	}
}

// put stores st under k (deletes it when nil or expired), counts the write
// and sweeps. reserved tells whether the caller reserved an entry for k;
// one that a new slot does not take is given back.
func (l *Engine) put(sh *shard, k *driver.StateKey, h uint64, st *driver.State, now int64, reserved bool) {
	if st != nil && st.Expires <= now {
		st = nil
	}
	if reserved && (st == nil || sh.find(k, h) != nil) {
		l.n.Add(-1)
	}
	l.set(sh, k, h, st)
	l.wrote(sh, now)
}

// wrote runs after every write to sh (locked): it looks at up to sweepOps
// of the entries of sh that expire soonest, then at as many of another
// shard (in turn, if its lock is free), deleting those that expired
// Grace ago (state that expired only just now is left for reuse by
// its key's next decision) and moving the others to their current expiry.
func (l *Engine) wrote(sh *shard, now int64) {
	l.sweep(sh, now)
	if len(l.shards) == 1 {
		return
	}
	sh.turn++
	o := &l.shards[(sh.self+sh.turn)&l.mask]
	if o != sh && o.top.Load() <= now-l.grace && o.mu.TryLock() {
		l.sweep(o, now)
		o.mu.Unlock()
	}
}

func (l *Engine) sweep(sh *shard, now int64) {
	old := now - l.grace
	for range sweepOps {
		if len(sh.h) == 0 || sh.h[0].at > old {
			break
		}
		sl := sh.h[0]
		if sl.st.Expires > old {
			sl.at = sl.st.Expires
			sh.h.fix(0)
			continue
		}
		l.remove(sh, sl)
	}
	sh.setTop()
}

// setTop records the shard's soonest place in its heap (sh locked).
func (sh *shard) setTop() {
	t := int64(math.MaxInt64)
	if len(sh.h) > 0 {
		t = sh.h[0].at
	}
	if sh.top.Load() != t {
		sh.top.Store(t)
	}
}

// evict deletes up to roomOps expired entries of sh (locked), the soonest
// first, and returns the expiry of its soonest live entry (0 if none).
func (l *Engine) evict(sh *shard, now int64) int64 {
	for range roomOps {
		if len(sh.h) == 0 {
			return 0
		}
		sl := sh.h[0]
		switch {
		case sl.st.Expires <= now:
			l.remove(sh, sl)
		case sl.at < sl.st.Expires:
			sl.at = sl.st.Expires
			sh.h.fix(0)
		default:
			return sl.st.Expires
		}
	}
	if len(sh.h) == 0 {
		return 0
	}
	return max(sh.h[0].at, now+1)
}

// makeRoom is called with no shard locked, after a reservation of n
// entries failed: it deletes expired entries of every shard (one at a
// time) and reserves n entries. When they still do not fit, it returns how
// long until the soonest entry expires.
func (l *Engine) makeRoom(n int64, now int64) (bool, time.Duration) {
	soonest := int64(0)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		e := l.evict(sh, now)
		sh.setTop()
		sh.mu.Unlock()
		if l.reserve(n) {
			return true, 0
		}
		if e != 0 && (soonest == 0 || e < soonest) {
			soonest = e
		}
	}
	if l.reserve(n) {
		return true, 0
	}
	return false, time.Duration(max(soonest-now, 1)) * time.Microsecond
}

// full turns decisions into refusals for want of room: none is allowed,
// and each retries when the soonest entry expires (or later).
func full(ds []driver.Decision, wait time.Duration) {
	for i := range ds {
		ds[i].Allowed, ds[i].Remaining = false, 0
		ds[i].RetryAfter = max(ds[i].RetryAfter, wait)
		ds[i].ResetAfter = max(ds[i].ResetAfter, ds[i].RetryAfter)
	}
}

// lockAll locks the shards of hs in index order (each once) and returns
// their indices, sorted.
func (l *Engine) lockAll(hs []uint64) []int {
	idx := make([]int, 0, len(hs))
	for _, h := range hs {
		i := int(h & l.mask)
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		l.shards[i].mu.Lock()
	}
	return idx
}

func (l *Engine) unlockAll(idx []int) {
	for _, i := range idx {
		l.shards[i].mu.Unlock()
	}
}

func (l *Engine) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]driver.Decision, error) {
	if err := driver.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hs := make([]uint64, len(reqs))
	for i := range reqs {
		hs[i] = l.hash(reqs[i].Key.Key)
	}
	var (
		now time.Time
		us  int64
	)
	states := make([]*driver.State, len(reqs))
	reserved := int64(0)
	for try := 0; ; try++ {
		idx := l.lockAll(hs)
		// The clock is read under the locks, so the decisions on a key see
		// time move forward in the order they are applied.
		now = l.now()
		us = now.UnixMicro()
		fresh := int64(0) // keys without a slot
		for i := range reqs {
			sl := l.shardOf(hs[i]).find(&reqs[i].Key, hs[i])
			states[i] = nil
			if sl == nil {
				fresh++
			} else if sl.st.Expires > us {
				states[i] = &sl.st
			}
		}
		if commit && fresh > reserved {
			if !l.reserve(fresh - reserved) {
				l.unlockAll(idx)
				ok, wait := l.makeRoom(fresh-reserved, us)
				if ok {
					reserved = fresh
					continue
				}
				l.n.Add(-reserved)
				idx = l.lockAll(hs)
				now = l.now()
				us = now.UnixMicro()
				for i := range reqs {
					states[i] = l.shardOf(hs[i]).get(&reqs[i].Key, hs[i], us)
				}
				ds, _ := driver.Evaluate(now, reqs, states, false)
				l.unlockAll(idx)
				full(ds, wait)
				return ds, nil
			}
			reserved = fresh
		}
		ds, next := driver.Evaluate(now, reqs, states, commit)
		for i, st := range next {
			sh := l.shardOf(hs[i])
			isNew := sh.find(&reqs[i].Key, hs[i]) == nil
			l.put(sh, &reqs[i].Key, hs[i], st, us, isNew && reserved > 0)
			if isNew && reserved > 0 {
				reserved--
			}
		}
		l.n.Add(-reserved) // reservations not taken (denied, or keys that found a slot)
		l.unlockAll(idx)
		return ds, nil
	}
}

// DecideOne is Decide for one request, without allocating when the key
// has state already.
func (l *Engine) DecideOne(ctx context.Context, r driver.Request, commit bool) (driver.Decision, error) {
	if err := driver.ValidateRequest(&r, commit); err != nil {
		return driver.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Decision{}, err
	}
	h := l.hash(r.Key.Key)
	sh := l.shardOf(h)
	reserved := false
	sh.mu.Lock()
	now := l.now() // under the lock: a key's decisions see time in the order they apply
	us := now.UnixMicro()
	// An expired state is passed on too: the engine treats it as absent and
	// reuses it for the next state.
	sl := sh.find(&r.Key, h)
	if sl == nil && commit {
		if !l.reserve(1) {
			sh.mu.Unlock()
			ok, wait := l.makeRoom(1, us)
			sh.mu.Lock()
			now = l.now()
			us = now.UnixMicro()
			if !ok {
				d, _ := driver.EvaluateOne(now, &r, sh.get(&r.Key, h, us), false)
				sh.mu.Unlock()
				ds := []driver.Decision{d}
				full(ds, wait)
				return ds[0], nil
			}
			sl = sh.find(&r.Key, h) // another decision may have made it meanwhile
		}
		reserved = true
	}
	var st *driver.State
	if sl != nil {
		st = &sl.st
	}
	d, next := driver.EvaluateOne(now, &r, st, commit)
	switch {
	case next == nil:
		if reserved {
			l.n.Add(-1)
		}
	case sl == nil:
		l.set(sh, &r.Key, h, next)
		l.wrote(sh, us)
	default:
		if reserved {
			l.n.Add(-1)
		}
		if next != &sl.st {
			sl.st = *next
		}
		sh.stored(sl)
		l.wrote(sh, us)
	}
	sh.mu.Unlock()
	return d, nil
}

func (l *Engine) Reset(ctx context.Context, keys []driver.StateKey) error {
	if err := driver.ValidateStateKeys(keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	hs := make([]uint64, len(keys))
	for i := range keys {
		hs[i] = l.hash(keys[i].Key)
	}
	idx := l.lockAll(hs)
	defer l.unlockAll(idx)
	for i := range keys {
		l.set(l.shardOf(hs[i]), &keys[i], hs[i], nil)
	}
	return nil
}

func (l *Engine) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	if err := driver.ValidatePermit(key, id, permits, ttl); err != nil {
		return driver.PermitGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.PermitGrant{}, err
	}
	h := l.hash(key.Key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := l.now()
	us := now.UnixMicro()
	reserved := false
	if sh.find(&key, h) == nil {
		if !l.reserve(1) {
			sh.mu.Unlock()
			ok, wait := l.makeRoom(1, us)
			sh.mu.Lock()
			now = l.now()
			us = now.UnixMicro()
			if !ok {
				return driver.PermitGrant{RetryAfter: wait, At: time.UnixMicro(us)}, nil
			}
		}
		reserved = true
	}
	g, st := driver.EvaluateAcquire(now, sh.get(&key, h, us), id, permits, ttl)
	l.put(sh, &key, h, st, us, reserved)
	return g, nil
}

func (l *Engine) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (driver.PermitGrant, error) {
	if err := driver.ValidatePermit(key, id, -1, ttl); err != nil {
		return driver.PermitGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.PermitGrant{}, err
	}
	h := l.hash(key.Key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := l.now()
	us := now.UnixMicro()
	g, st, err := driver.EvaluateRenew(now, sh.get(&key, h, us), id, ttl)
	if err != nil {
		return g, err
	}
	l.put(sh, &key, h, st, us, false)
	return g, nil
}

func (l *Engine) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	if err := driver.ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h := l.hash(key.Key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	us := l.now().UnixMicro()
	st, err := driver.EvaluateRelease(time.UnixMicro(us), sh.get(&key, h, us), id)
	if err != nil {
		return err
	}
	l.put(sh, &key, h, st, us, false)
	return nil
}

// TTL reports whether the engine holds live state under k and how long
// until it expires on the engine's clock.
func (l *Engine) TTL(ctx context.Context, k driver.StateKey) (time.Duration, bool, error) {
	if err := driver.ValidateStateKeys([]driver.StateKey{k}); err != nil {
		return 0, false, err
	}
	h := l.hash(k.Key)
	sh := l.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := l.now().UnixMicro()
	st := sh.get(&k, h, now)
	if st == nil {
		return 0, false, nil
	}
	return time.Duration(st.Expires-now) * time.Microsecond, true, nil
}

// Keys lists the live state held: each key's canonical form
// (driver.StateKey.String) and its time left on the engine's clock.
func (l *Engine) Keys() map[string]time.Duration {
	now := l.now().UnixMicro()
	out := map[string]time.Duration{}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, head := range sh.m {
			for sl := head; sl != nil; sl = sl.next {
				if sl.st.Expires > now {
					k := driver.StateKey{Group: sl.group, Name: sl.name, Kind: sl.kind, Key: sl.key}
					out[k.String()] = time.Duration(sl.st.Expires-now) * time.Microsecond
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Entries counts the entries held, expired ones included, and checks that
// the maps, the expiry heaps (and their order) and the count agree.
func (l *Engine) Entries() (int, error) {
	total := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n := 0
		for h, head := range sh.m {
			for sl := head; sl != nil; sl = sl.next {
				if sl.hash != h || l.hash(sl.key) != h || &l.shards[h&l.mask] != sh ||
					sl.idx < 0 || sl.idx >= len(sh.h) || sh.h[sl.idx] != sl || sl.at > sl.st.Expires {
					sh.mu.Unlock()
					return 0, fmt.Errorf("slot of %q out of place", sl.key)
				}
				n++
			}
		}
		if n != len(sh.h) {
			sh.mu.Unlock()
			return 0, fmt.Errorf("%d slots in the map of shard %d, %d in its heap", n, i, len(sh.h))
		}
		for j := 1; j < len(sh.h); j++ {
			if sh.h[(j-1)/2].at > sh.h[j].at {
				sh.mu.Unlock()
				return 0, fmt.Errorf("the heap of shard %d is out of order at %d", i, j)
			}
		}
		sh.mu.Unlock()
		total += n
	}
	if c := l.n.Load(); c != int64(total) {
		return 0, fmt.Errorf("%d slots held, %d counted", total, c)
	}
	return total, nil
}

// Len returns how many entries are held, expired ones included (and those
// reserved by decisions under way).
func (l *Engine) Len() int { return int(l.n.Load()) }
