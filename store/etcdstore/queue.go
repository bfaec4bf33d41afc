package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/wakehub"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// waiterSpace holds the queue of each contended lock's waiters: one key
// per waiter, <prefix>waiter/<key>\x00<WaiterID of its token>, on an etcd
// lease that lives at least the waiter's stay. A key's create revision is
// the waiter's arrival: a waiter's later attempts put it again (moving it
// onto a newer lease), which keeps the revision, and a waiter that stops
// attempting loses its key, and its place, with the lease. NUL ends the
// lock's key, so no key's queue is the prefix of another's.
const waiterSpace = "waiter/"

// waitersPrefix is the prefix of key's waiters.
func (s *Store) waitersPrefix(key string) string { return s.prefix + waiterSpace + key + "\x00" }

// cmpRangeCreateRev compares the create revision of every key starting
// with prefix (on no key, it compares 0).
func cmpRangeCreateRev(prefix string, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	c := cmpCreateRev(prefix, r, rev)
	c.RangeEnd = []byte(prefixEnd(prefix))
	return c
}

// opCountWaiters reads the keys of the waiters of prefix that arrived
// before rev (0: all of them); count them with len(Kvs), since etcd's
// count (and CountOnly) ignores the create revision filter.
func opCountWaiters(prefix string, before int64) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefixEnd(prefix)), KeysOnly: true}
	if before > 0 {
		r.MaxCreateRevision = before - 1
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

// AcquireQueued is AcquireHolder for a waiter that keeps its place in
// key's queue for stay (leasedriver.Queuer): a free key goes to the first
// live waiter, never to a newcomer. One transaction: the acquire, which
// succeeds only when no live waiter arrived before this one and otherwise
// keeps the waiter's place (put again on a lease that lives at least
// stay), or takes it on the waiter's first attempt.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	if err := leasedriver.ValidateQueued(key, token, ttl, holder, stay); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	wk := s.waitersPrefix(key) + leasedriver.WaiterID(token)
	// The place is kept on a lease that lives at least stay.
	sg := s.leaseFor(stay, time.Now())
	if r := sg.result(ctx); r.err != nil {
		s.dropGrant(sg)
		return lease.Grant{}, wrapErr("acquire: grant the place's lease", r.err)
	}
	return v.acquire(ctx, key, token, ttl, holder, &place{key: wk, rev: s.places.get(wk), lease: sg.id})
}

// place is a waiter's place in a key's queue, for a queued acquire: its
// key, its create revision (the waiter's arrival; 0 before its first
// attempt took the place) and the etcd lease that keeps it for the
// waiter's stay.
type place struct {
	key   string
	rev   int64
	lease int64
}

// places remembers the create revision of the places this store's waiters
// hold, from their first attempt until their grant or Leave.
type places struct {
	mu  sync.Mutex
	rev map[string]int64
}

func (p *places) get(wk string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev[wk]
}

func (p *places) set(wk string, rev int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rev == nil {
		p.rev = map[string]int64{}
	}
	p.rev[wk] = rev
}

func (p *places) drop(wk string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.rev, wk)
}

// Leave gives token's place in key's queue up (leasedriver.Queuer): its
// key is deleted, which wakes the watchers of key.
func (v leases) Leave(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateLeave(key, token); err != nil {
		return err
	}
	s := v.s
	wk := s.waitersPrefix(key) + leasedriver.WaiterID(token)
	s.places.drop(wk)
	if _, err := s.rpc.txn(ctx, nil, ops(opDelete(wk)), nil); err != nil {
		return wrapErr("leave the queue", err)
	}
	return nil
}

// Watch returns a channel that receives when key's lock is deleted
// (released, or expired with its etcd lease: etcd tells both) or a waiter
// leaves its queue while the key is free (leasedriver.Waker), naming the
// waiter that is first now. One etcd watch of the lock and one of its
// queue serve every watcher of the key in this store; they end a while
// after the last watcher stopped.
func (v leases) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return v.s.watches.watch(ctx, v.s, key, waiter)
}

// wakeLinger is how long a key's etcd watches stay after its last watcher
// stopped, for the next wait on the same key.
const wakeLinger = 2 * time.Second

// watches are the etcd watches of the keys a store's waiters watch.
type watches struct {
	hub  wakehub.Hub
	mu   sync.Mutex
	keys map[string]*keyWatch
}

// keyWatch is the watching of one key.
type keyWatch struct {
	ready  chan struct{} // closed once both watches are created, or failed
	err    error
	cancel context.CancelFunc
	refs   int
	linger *time.Timer
}

func (w *watches) watch(ctx context.Context, s *Store, key, waiter string) (<-chan string, func(), error) {
	ch, stop := w.hub.Watch(key, waiter)
	w.mu.Lock()
	if w.keys == nil {
		w.keys = map[string]*keyWatch{}
	}
	kw := w.keys[key]
	if kw == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.c.Ctx()))
		kw = &keyWatch{ready: make(chan struct{}), cancel: cancel}
		w.keys[key] = kw
		go w.run(wctx, s, key, kw)
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.refs++
	w.mu.Unlock()
	unwatch := func() {
		stop()
		w.mu.Lock()
		defer w.mu.Unlock()
		kw.refs--
		if kw.refs > 0 || w.keys[key] != kw || kw.linger != nil {
			return
		}
		kw.linger = time.AfterFunc(wakeLinger, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if kw.refs > 0 || w.keys[key] != kw {
				return
			}
			delete(w.keys, key)
			kw.cancel()
		})
	}
	select {
	case <-kw.ready:
	case <-ctx.Done():
		unwatch()
		return nil, nil, ctx.Err()
	}
	if kw.err != nil {
		unwatch()
		return nil, nil, kw.err
	}
	return ch, unwatch, nil
}

// run watches key's lock and queue until ctx ends: it reads both at one
// revision, then follows their changes from the next, keeping the queue's
// order (create revisions) itself, so that a wake-up costs no request. The
// deletion of the lock (a release, or an expiry) wakes the key's watchers
// naming its first waiter, and so does the departure of the first waiter
// while the lock is free. A watch that breaks ends the run (its watchers
// poll) and the next watch of the key starts another.
func (w *watches) run(ctx context.Context, s *Store, key string, kw *keyWatch) {
	lock, wp := s.lockKey(key), s.waitersPrefix(key)
	fail := func(err error) {
		w.mu.Lock()
		if w.keys[key] == kw {
			delete(w.keys, key)
		}
		w.mu.Unlock()
		kw.cancel()
		if !isClosed(kw.ready) {
			kw.err = err
			close(kw.ready)
		}
	}
	resp, err := s.rpc.txn(ctx, nil, ops(opGet(lock), opRangeKeys(wp)), nil)
	if err != nil {
		fail(wrapErr("watch", err))
		return
	}
	rev := resp.GetHeader().GetRevision()
	held := firstKV(resp.Responses[0]) != nil
	queue := map[string]int64{} // waiter ID -> create revision
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		queue[strings.TrimPrefix(string(kv.Key), wp)] = kv.CreateRevision
	}
	first := func() string {
		who, at := "", int64(0)
		for id, r := range queue {
			if at == 0 || r < at {
				who, at = id, r
			}
		}
		return who
	}
	lw := s.c.Watch(ctx, lock, clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	qw := s.c.Watch(ctx, wp, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	for created := 0; created < 2; {
		var r clientv3.WatchResponse
		var ok bool
		select {
		case r, ok = <-lw:
		case r, ok = <-qw:
		}
		if !ok || r.Err() != nil || r.Canceled {
			fail(wrapErr("watch", watchErr(ctx, r)))
			return
		}
		if r.Created {
			created++
		}
		// Events may come before the other watch's creation.
		if len(r.Events) > 0 {
			held = w.apply(key, lock, wp, r.Events, held, queue, first)
		}
	}
	close(kw.ready)
	for {
		var r clientv3.WatchResponse
		var ok bool
		select {
		case r, ok = <-lw:
		case r, ok = <-qw:
		}
		if !ok || r.Err() != nil || r.Canceled {
			fail(wrapErr("watch", watchErr(ctx, r)))
			w.hub.Wake(key, "") // wake-ups may be missed from now on
			return
		}
		held = w.apply(key, lock, wp, r.Events, held, queue, first)
	}
}

// apply follows a key's lock and queue through events, waking its
// watchers where the key became free or its first waiter left a free key;
// it returns whether the lock is held.
func (w *watches) apply(key, lock, wp string, evs []*clientv3.Event, held bool, queue map[string]int64, first func() string) bool {
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		del := ev.Type == mvccpb.DELETE
		switch {
		case k == lock && del:
			held = false
			w.hub.Wake(key, first())
		case k == lock:
			held = true
		case strings.HasPrefix(k, wp) && del:
			id := strings.TrimPrefix(k, wp)
			was := first() == id
			delete(queue, id)
			if was && !held {
				w.hub.Wake(key, first())
			}
		case strings.HasPrefix(k, wp):
			queue[strings.TrimPrefix(k, wp)] = ev.Kv.CreateRevision
		}
	}
	return held
}

// opRangeKeys reads the keys (not the values) starting with prefix.
func opRangeKeys(prefix string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte(prefix), RangeEnd: []byte(prefixEnd(prefix)), KeysOnly: true,
	}}}
}

// watchErr is the error of a watch response that ended the watch.
func watchErr(ctx context.Context, r clientv3.WatchResponse) error {
	if err := r.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("etcdstore: the watch was closed")
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
