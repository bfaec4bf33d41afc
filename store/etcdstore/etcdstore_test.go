package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/etcdstore"
)

// shared returns a client to the shared member, a store with a prefix of
// the test's own, that prefix, and the shortest TTL etcd grants exactly.
func shared(t *testing.T) (*clientv3.Client, *etcdstore.Store, string, time.Duration) {
	t.Helper()
	srv := testenv.SharedEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	prefix := uniquePrefix(t)
	return c, newEtcd(t, c, &etcdstore.Options{Prefix: prefix}), prefix, minTTL(t, c)
}

// lockKV reads the lock key of key straight from etcd.
func lockKV(t *testing.T, c *clientv3.Client, prefix, key string) (createRev, leaseID int64, ok bool) {
	t.Helper()
	resp, err := c.Get(ctxT(t), prefix+"lock/"+key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, false
	}
	return resp.Kvs[0].CreateRevision, resp.Kvs[0].Lease, true
}

// grantedTTL returns the TTL etcd granted lease id, -1 if it is gone.
func grantedTTL(t *testing.T, c *clientv3.Client, id int64) time.Duration {
	t.Helper()
	resp, err := c.TimeToLive(ctxT(t), clientv3.LeaseID(id))
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL < 0 {
		return -1
	}
	return time.Duration(resp.GrantedTTL) * time.Second
}

// classTTL is the etcd lease TTL the store asks for ttl: ceil(ttl+250ms)
// seconds, or etcd's minimum.
func classTTL(ttl, unit time.Duration) time.Duration {
	return max((ttl+250*time.Millisecond+time.Second-1)/time.Second*time.Second, unit)
}

func TestTTLRoundedUpToWhatEtcdGrants(t *testing.T) {
	t.Parallel()
	c, es, prefix, unit := shared(t)
	ctx := ctxT(t)
	if unit < time.Second {
		t.Fatalf("etcd granted %v for 1s", unit)
	}
	for i, ttl := range []time.Duration{100 * time.Millisecond, 1200 * time.Millisecond, 3 * time.Second} {
		k := "k" + strconv.Itoa(i)
		start := time.Now()
		g, err := es.Leases().Acquire(ctx, k, lease.NewToken(), ttl)
		if err != nil {
			t.Fatal(err)
		}
		class := classTTL(ttl, unit)
		// The lock has at least ttl, and its lease at most the class's TTL.
		if g.TTL < ttl || g.TTL > class+time.Since(start) {
			t.Fatalf("Grant.TTL = %v for %v, want %v to %v", g.TTL, ttl, ttl, class)
		}
		_, id, ok := lockKV(t, c, prefix, k)
		if !ok {
			t.Fatal("no lock key")
		}
		if got := grantedTTL(t, c, id); got != class {
			t.Fatalf("lock of a %v lease on an etcd lease of %v, want %v", ttl, got, class)
		}
	}

	// The Locker's validity follows the TTL the store reports.
	lk := leasetest.NewLocker(t, es.Leases(), nil)
	before := time.Now()
	l, err := lk.TryAcquire(ctx, "k3", 100*time.Millisecond)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	class := classTTL(100*time.Millisecond, unit)
	margin := time.Duration(float64(class)*0.01) + 2*time.Millisecond // lease.Options defaults, at most
	if vu := l.ValidUntil(); vu.Before(before.Add(100*time.Millisecond-margin)) || vu.After(after.Add(class)) {
		t.Fatalf("ValidUntil %v after the request, want 100ms to %v", vu.Sub(before), class)
	}
}

// TestLocksShareLeasesNotLifetimes: locks of one TTL class share an etcd
// lease, and a renewal moves only its own lock onto a later lease, so a
// lock whose holder stops renewing still expires on time.
func TestLocksShareLeasesNotLifetimes(t *testing.T) {
	t.Parallel()
	c, es, prefix, unit := shared(t)
	ctx := ctxT(t)
	s := es.Leases()
	ta, tb := lease.NewToken(), lease.NewToken()
	ga, err := s.Acquire(ctx, "a", ta, unit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "b", tb, unit); err != nil {
		t.Fatal(err)
	}
	_, ida, _ := lockKV(t, c, prefix, "a")
	_, idb, _ := lockKV(t, c, prefix, "b")
	if ida != idb {
		t.Logf("a and b on leases %x and %x (a new lease was due)", ida, idb)
	}
	// b keeps renewing; a does not.
	stop := make(chan struct{})
	renewed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				renewed <- nil
				return
			case <-time.After(unit / 4):
			}
			if _, err := s.Renew(ctx, "b", tb, unit); err != nil {
				renewed <- err
				return
			}
		}
	}()
	waitFree(t, s, "a", 10*unit+5*time.Second)
	close(stop)
	if err := <-renewed; err != nil {
		t.Fatalf("renewing b: %v", err)
	}
	if info, err := s.Inspect(ctx, "b"); err != nil || !info.Held {
		t.Fatalf("b after a expired: %+v (%v), want held", info, err)
	}
	if _, err := s.Renew(ctx, "a", ta, unit); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("renewing a after it expired: %v, want ErrNotHeld", err)
	}
	g, err := s.Acquire(ctx, "a", lease.NewToken(), unit)
	if err != nil || g.Fence <= ga.Fence {
		t.Fatalf("a after expiry: %+v (%v), want a fence above %d", g, err, ga.Fence)
	}
}

func TestCompareInCallersTxn(t *testing.T) {
	t.Parallel()
	c, es, prefix, unit := shared(t)
	ctx := ctxT(t)
	app := prefix + "app/value"
	lk := leasetest.NewLocker(t, es.Leases(), nil)
	write := func(l *lease.Lease, v string) bool {
		t.Helper()
		resp, err := c.Txn(ctx).If(es.Compare(l)).Then(clientv3.OpPut(app, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	read := func() string {
		t.Helper()
		resp, err := c.Get(ctx, app)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}

	a, err := lk.TryAcquire(ctx, "k", unit)
	if err != nil {
		t.Fatal(err)
	}
	if !write(a, "A1") || read() != "A1" {
		t.Fatalf("holder's txn refused; value %q", read())
	}
	// A's lease expires; nobody has taken the key yet. A max-fence guard
	// would still admit A here; the holder check does not.
	<-a.Done()
	waitFree(t, es.Leases(), "k", 10*unit+5*time.Second)
	if write(a, "A2") || read() != "A1" {
		t.Fatalf("expired holder's txn applied; value %q", read())
	}
	b, err := lk.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if write(a, "A3") {
		t.Fatal("old holder's txn applied after takeover")
	}
	if !write(b, "B") || read() != "B" {
		t.Fatalf("new holder's txn refused; value %q", read())
	}
	// A re-acquire with B's token keeps the tenure, so the compare holds.
	if _, err := es.Leases().Acquire(ctx, "k", b.Token().Reveal(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !write(b, "B2") {
		t.Fatal("holder's txn refused after it re-acquired")
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if write(b, "B3") || read() != "B2" {
		t.Fatalf("released holder's txn applied; value %q", read())
	}
}

func TestFencedPut(t *testing.T) {
	t.Parallel()
	c, es, prefix, _ := shared(t)
	ctx := ctxT(t)
	put := func(f uint64, v string) error { return es.FencedPut(ctx, "r", v, f) }
	get := func() (string, uint64) {
		t.Helper()
		v, f, err := es.FencedGet(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		return v, f
	}
	stale := func(err error, current uint64) {
		t.Helper()
		var se *fence.StaleError
		if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Current != current || se.Resource != "r" {
			t.Fatalf("err = %v, want *fence.StaleError with current %d", err, current)
		}
	}

	if v, f := get(); v != "" || f != 0 {
		t.Fatalf("unwritten resource: %q/%d", v, f)
	}
	stale(put(0, "zero"), 0)
	if v, f := get(); v != "" || f != 0 {
		t.Fatalf("fence 0 wrote %q/%d", v, f)
	}
	if err := put(9, "nine"); err != nil {
		t.Fatal(err)
	}
	// 10 > 9 although "10" < "9" as text.
	if err := put(10, "ten"); err != nil {
		t.Fatalf("fence 10 after 9: %v", err)
	}
	stale(put(10, "ten again"), 10) // strict: equal is stale
	stale(put(9, "late"), 10)
	if v, f := get(); v != "ten" || f != 10 {
		t.Fatalf("stored %q/%d, want ten/10", v, f)
	}
	if err := put(math.MaxUint64, "max"); err != nil {
		t.Fatal(err)
	}
	stale(put(1<<63, "half"), math.MaxUint64)
	if v, f := get(); v != "max" || f != math.MaxUint64 {
		t.Fatalf("stored %q/%d, want max/%d", v, f, uint64(math.MaxUint64))
	}
	// The value sits at <prefix>res/<resource> for plain readers.
	if resp, err := c.Get(ctx, prefix+"res/r"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "max" {
		t.Fatalf("value key: %v %v", resp, err)
	}
	if err := es.FencedPut(ctx, "", "v", 1); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("empty resource: %v", err)
	}
	if _, _, err := es.FencedGet(ctx, "a\x00b"); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("resource with NUL: %v", err)
	}

	// Concurrent writers: the greatest fence wins, whatever the order.
	var wg sync.WaitGroup
	for f := uint64(1); f <= 30; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := es.FencedPut(ctx, "race", fmt.Sprint(f), f); err != nil && !errors.Is(err, fence.ErrStale) {
				t.Errorf("fence %d: %v", f, err)
			}
		}()
	}
	wg.Wait()
	if v, f, err := es.FencedGet(ctx, "race"); err != nil || v != "30" || f != 30 {
		t.Fatalf("after the race: %q/%d (%v), want 30/30", v, f, err)
	}
}

func TestFencesAreCreateRevisions(t *testing.T) {
	t.Parallel()
	c, es, prefix, unit := shared(t)
	ctx := ctxT(t)
	s := es.Leases()
	var last uint64
	check := func(how, key string, g lease.Grant) {
		t.Helper()
		if g.Fence <= last {
			t.Fatalf("%s: fence %d not above %d", how, g.Fence, last)
		}
		last = g.Fence
		rev, _, ok := lockKV(t, c, prefix, key)
		if !ok || uint64(rev) != g.Fence {
			t.Fatalf("%s: lock create revision %d (present %v), fence %d", how, rev, ok, g.Fence)
		}
	}
	for i := 0; i < 3; i++ {
		tok := lease.NewToken()
		g, err := s.Acquire(ctx, "k", tok, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		check("after release", "k", g)
		if err := s.Release(ctx, "k", tok); err != nil {
			t.Fatal(err)
		}
		info, err := s.Inspect(ctx, "k")
		if err != nil || info.Held || info.Fence != 0 {
			t.Fatalf("after release: %+v (%v), want free with nothing kept", info, err)
		}
		// Nothing of the ended lease is left in etcd.
		resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Fatalf("after release the store keeps %d keys (%v), want none", resp.Count, err)
		}
	}
	// Across expiry.
	g, err := s.Acquire(ctx, "k", lease.NewToken(), unit)
	if err != nil {
		t.Fatal(err)
	}
	check("first holder", "k", g)
	waitFree(t, s, "k", 10*unit+5*time.Second)
	g, err = s.Acquire(ctx, "k", lease.NewToken(), unit)
	if err != nil {
		t.Fatal(err)
	}
	check("after expiry", "k", g)
	// Revisions are cluster-wide: another key's fence is higher too.
	g, err = s.Acquire(ctx, "other", lease.NewToken(), unit)
	if err != nil {
		t.Fatal(err)
	}
	check("other key", "other", g)
}

func TestReacquireMovesOntoNewLease(t *testing.T) {
	t.Parallel()
	c, es, prefix, unit := shared(t)
	ctx := ctxT(t)
	s := es.Leases()
	tok := lease.NewToken()
	g1, err := s.Acquire(ctx, "k", tok, unit)
	if err != nil {
		t.Fatal(err)
	}
	_, id1, _ := lockKV(t, c, prefix, "k")
	g2, err := s.Acquire(ctx, "k", tok, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rev, id2, ok := lockKV(t, c, prefix, "k")
	switch {
	case g2.Fence != g1.Fence || uint64(rev) != g1.Fence || !ok:
		t.Fatalf("re-acquire: fence %d, create revision %d, want %d", g2.Fence, rev, g1.Fence)
	case g2.TTL < 30*time.Second || g2.TTL > 31*time.Second || id2 == id1 || grantedTTL(t, c, id2) != 31*time.Second:
		t.Fatalf("re-acquire: TTL %v on lease %x (was %x), want 30s on a new lease of 31s", g2.TTL, id2, id1)
	}
	// The old lease expires on its own ...
	for deadline := time.Now().Add(10*unit + 5*time.Second); grantedTTL(t, c, id1) >= 0; {
		if time.Now().After(deadline) {
			t.Fatal("old lease never went away")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ... and the lock outlives it.
	if info, err := s.Inspect(ctx, "k"); err != nil || !info.Held || info.Fence != g1.Fence || info.TTL < 20*time.Second {
		t.Fatalf("after the old lease ended: %+v (%v)", info, err)
	}

	// Renew moves the lock onto a lease that lives at least the TTL asked.
	g4, err := s.Renew(ctx, "k", tok, time.Minute)
	if err != nil || g4.Fence != g1.Fence || g4.TTL < time.Minute || g4.TTL > 61*time.Second {
		t.Fatalf("longer renew: %+v (%v), want fence %d and 1m", g4, err, g1.Fence)
	}
	if rev, id4, _ := lockKV(t, c, prefix, "k"); id4 == id2 || uint64(rev) != g1.Fence || grantedTTL(t, c, id4) != 61*time.Second {
		t.Fatalf("longer renew: lock on lease %x with revision %d", id4, rev)
	}
	if err := s.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := lockKV(t, c, prefix, "k"); ok {
		t.Fatal("lock key left after release")
	}
}

// TestInvalidInputGrantsNoLease uses a member of its own so that the list
// of etcd leases is not shared with other tests.
func TestInvalidInputGrantsNoLease(t *testing.T) {
	t.Parallel()
	srv := testenv.Etcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := ctxT(t)
	prefix := uniquePrefix(t)
	es := newEtcd(t, c, &etcdstore.Options{Prefix: prefix})
	s := es.Leases()
	leases := func() int {
		t.Helper()
		resp, err := c.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	keys := func() int64 {
		t.Helper()
		resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := leases()
	tok := lease.NewToken()
	long := strings.Repeat("k", lease.MaxKeyLen+1)
	calls := map[string]func() error{
		"acquire empty key":  func() error { _, err := s.Acquire(ctx, "", tok, time.Second); return err },
		"acquire long key":   func() error { _, err := s.Acquire(ctx, long, tok, time.Second); return err },
		"acquire bad utf8":   func() error { _, err := s.Acquire(ctx, "\xff", tok, time.Second); return err },
		"acquire zero ttl":   func() error { _, err := s.Acquire(ctx, "k", tok, 0); return err },
		"acquire long ttl":   func() error { _, err := s.Acquire(ctx, "k", tok, lease.MaxTTL+1); return err },
		"acquire no token":   func() error { _, err := s.Acquire(ctx, "k", "", time.Second); return err },
		"renew zero ttl":     func() error { _, err := s.Renew(ctx, "k", tok, 0); return err },
		"renew long token":   func() error { _, err := s.Renew(ctx, "k", strings.Repeat("t", 200), time.Second); return err },
		"release NUL key":    func() error { return s.Release(ctx, "a\x00", tok) },
		"inspect empty key":  func() error { _, err := s.Inspect(ctx, ""); return err },
		"fenced put no name": func() error { return es.FencedPut(ctx, "", "v", 5) },
		"locker zero ttl":    func() error { _, err := leasetest.NewLocker(t, s, nil).TryAcquire(ctx, "k", 0); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: %v, want lease.ErrInvalid", name, err)
		} else if strings.Contains(err.Error(), tok) {
			t.Errorf("%s: error contains the token", name)
		}
	}
	if after := leases(); after != before {
		t.Fatalf("invalid calls left %d etcd leases, %d before", after, before)
	}
	if n := keys(); n != 0 {
		t.Fatalf("invalid calls wrote %d keys", n)
	}
	// The positive control: a valid acquire does grant one.
	if _, err := s.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := leases(); after != before+1 {
		t.Fatalf("a valid acquire left %d etcd leases, %d before", after, before)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := testenv.SharedEtcd(t)
	p := testenv.NewProxy(t, hostPort(srv.Endpoints()[0]))
	c := newClient(t, "http://"+p.Addr())
	es := newEtcd(t, c, &etcdstore.Options{Prefix: uniquePrefix(t)})
	s := es.Leases()
	tok := lease.NewToken()
	if _, err := s.Acquire(ctxT(t), "held", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(ctx context.Context) error{
		"acquire":    func(ctx context.Context) error { _, err := s.Acquire(ctx, "k", tok, time.Minute); return err },
		"renew":      func(ctx context.Context) error { _, err := s.Renew(ctx, "held", tok, time.Minute); return err },
		"release":    func(ctx context.Context) error { return s.Release(ctx, "held", tok) },
		"inspect":    func(ctx context.Context) error { _, err := s.Inspect(ctx, "held"); return err },
		"fenced put": func(ctx context.Context) error { return es.FencedPut(ctx, "r", "v", 1) },
		"fenced get": func(ctx context.Context) error { _, _, err := es.FencedGet(ctx, "r"); return err },
		"cancelled": func(context.Context) error {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, err := s.Inspect(ctx, "k")
			return err
		},
		"locker": func(ctx context.Context) error {
			_, err := leasetest.NewLocker(t, s, nil).TryAcquire(ctx, "k", time.Minute)
			return err
		},
	}
	for _, mode := range []string{"cut", "dropped replies"} {
		if mode == "cut" {
			p.Cut()
		} else {
			// Connected first, so requests reach the server and only the
			// replies are lost.
			eventually(t, "inspect after heal", func(ctx context.Context) (lease.Info, error) { return s.Inspect(ctx, "held") })
			p.DropReplies()
		}
		for name, call := range calls {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			start := time.Now()
			err := call(ctx)
			cancel()
			if !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("%s, %s: %v, want lease.ErrUnavailable", mode, name, err)
			} else if strings.Contains(err.Error(), tok) {
				t.Errorf("%s, %s: error contains the token", mode, name)
			}
			t.Logf("%s, %s: failed after %v", mode, name, time.Since(start).Round(time.Millisecond))
		}
		p.Heal()
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	srv := testenv.SharedEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := ctxT(t)
	// nil options: the default prefix. (Bad options: TestNewRefusesBadOptions.)
	key := uniquePrefix(t) + "k"
	if _, err := newEtcd(t, c, nil).Leases().Acquire(ctx, key, lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Get(ctx, "tenure/lock/"+key); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("default prefix: %v %v", resp, err)
	}
	// Stores with different prefixes share nothing.
	p1, p2 := uniquePrefix(t)+"a/", uniquePrefix(t)+"b/"
	s1 := newEtcd(t, c, &etcdstore.Options{Prefix: p1}).Leases()
	s2 := newEtcd(t, c, &etcdstore.Options{Prefix: p2}).Leases()
	if _, err := s1.Acquire(ctx, "k", lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Acquire(ctx, "k", lease.NewToken(), time.Minute); err != nil {
		t.Fatalf("second prefix: %v", err)
	}
	if _, err := s1.Acquire(ctx, "k", lease.NewToken(), time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("same prefix: %v, want ErrHeld", err)
	}
}

// TestHolderPut: HolderPut writes only while the lease holds its key (its
// token and the lock's revision), before and after the next holder
// acquired, admits several writes of one tenure, refuses a fence below an
// admitted one and bad input, and writes nothing when it refuses.
func TestHolderPut(t *testing.T) {
	t.Parallel()
	_, es, _, unit := shared(t)
	ctx := ctxT(t)
	lk := leasetest.NewLocker(t, es.Leases(), nil)
	const res = "res"
	put := func(l *lease.Lease, v string) error { return es.HolderPut(ctx, l, res, v) }
	want := func(v string, f uint64) {
		t.Helper()
		got, gf, err := es.FencedGet(ctx, res)
		if err != nil || got != v || gf != f {
			t.Fatalf("value %q fence %d (%v), want %q fence %d", got, gf, err, v, f)
		}
	}
	a, err := lk.TryAcquire(ctx, "k", unit)
	if err != nil {
		t.Fatal(err)
	}
	if err := put(a, "A1"); err != nil {
		t.Fatalf("the holder's put: %v", err)
	}
	if err := put(a, "A2"); err != nil {
		t.Fatalf("a second put in the same tenure: %v", err)
	}
	want("A2", a.Fence())
	// Not the holder: another token with the holder's key and fence.
	if err := put(lease.Remote("k", tenure.TokenOf("forged"), a.Fence()), "forged"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a forged token: %v, want lease.ErrNotHeld", err)
	}
	for _, bad := range []struct {
		l   *lease.Lease
		res string
	}{{nil, res}, {a, ""}, {a, "\xff"}} {
		if err := es.HolderPut(ctx, bad.l, bad.res, "bad"); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("HolderPut(%v, %q): %v, want lease.ErrInvalid", bad.l, bad.res, err)
		}
	}
	want("A2", a.Fence())
	// A's lease expires; nobody has taken the key yet. FencedPut would
	// still admit A here; HolderPut does not.
	waitFree(t, es.Leases(), "k", 10*unit+5*time.Second)
	if err := put(a, "A-expired"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("an expired holder's put: %v, want lease.ErrNotHeld", err)
	}
	b, err := lk.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := put(a, "A-late"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("the previous holder's put: %v, want lease.ErrNotHeld", err)
	}
	if err := put(b, "B"); err != nil {
		t.Fatalf("the next holder's put: %v", err)
	}
	want("B", b.Fence())
	// A greater fence admitted for the resource (another key's tenure
	// wrote it): B's put is stale.
	if err := es.FencedPut(ctx, res, "newer", b.Fence()+10); err != nil {
		t.Fatal(err)
	}
	var se *fence.StaleError
	if err := put(b, "B-stale"); !errors.As(err, &se) || se.Current != b.Fence()+10 || se.Fence != b.Fence() {
		t.Fatalf("a put below the admitted fence: %v, want a *fence.StaleError with current %d", err, b.Fence()+10)
	}
	want("newer", b.Fence()+10)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := put(b, "B-released"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a released holder's put: %v, want lease.ErrNotHeld", err)
	}
	want("newer", b.Fence()+10)
}
