package redisstore_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/redisstore"
)

// listTargets are the stores List runs on: one server and a cluster, each
// through rueidis and go-redis, with the given fence retention. Each
// target has its own key prefix; c is a direct client on the same server
// or cluster.
func listTargets(t *testing.T, retention time.Duration) []struct {
	name string
	s    *redisstore.Store
	c    rueidis.Client
	o    *redisstore.Options
} {
	srv := testenv.SharedRedis(t)
	cl := testenv.SharedRedisCluster(t)
	opts := func() *redisstore.Options {
		return &redisstore.Options{Prefix: "listtest:" + rand.Text()[:8] + ":", FenceRetention: retention}
	}
	type tg = struct {
		name string
		s    *redisstore.Store
		c    rueidis.Client
		o    *redisstore.Options
	}
	var out []tg
	o := opts()
	out = append(out, tg{"rueidis", checked(t, newClient(t, srv.Addr()), o), newClient(t, srv.Addr()), o})
	o = opts()
	out = append(out, tg{"goredis", checkedGo(t, newGoClient(t, srv.Addr()), o), newClient(t, srv.Addr()), o})
	o = opts()
	out = append(out, tg{"cluster-rueidis", checked(t, newClusterClient(t, cl.Addrs(), nil), o), newClusterClient(t, cl.Addrs(), nil), o})
	o = opts()
	out = append(out, tg{"cluster-goredis", checkedGo(t, newGoClusterClient(t, cl.Addrs(), nil), o), newClusterClient(t, cl.Addrs(), nil), o})
	return out
}

// List pages through every key with a fence key, in byte order (not the
// order of the percent-encoded Redis keys), with the current holder's
// description; a released key stays with its fence and no holder until
// its fence key expires; keys of other prefixes, fenced resources, the
// fence floors and keys the store would not write are left out; glob
// characters in keys and prefixes are taken literally.
func TestListLeases(t *testing.T) {
	for _, tg := range listTargets(t, 0) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			s := tg.s
			ha := s.Leases().(leasedriver.HolderAcquirer)
			l := s.Leases().(lease.Lister)
			// '{' sorts after 'b', but its encoding "%7B" sorts before it.
			keys := []string{"jobs/b", "jobs/a", "jobs/{c}", "jobs/%", "jobs/*", "jobt", "other/x"}
			toks := map[string]string{}
			for i, k := range keys {
				toks[k] = lease.NewToken()
				holder := "node " + k
				if i == 1 {
					holder = "" // jobs/a: no description
				}
				if _, err := ha.AcquireHolder(ctx, k, toks[k], 30*time.Second, holder); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Leases().Release(ctx, "jobs/b", toks["jobs/b"]); err != nil {
				t.Fatal(err)
			}
			// Keys that must not be listed: a fenced resource of the same
			// store, a lease of another prefix, a foreign key that looks
			// like a fence key but is not encoded as the store encodes.
			if err := s.FencedSet(ctx, "jobs/r", 1, []byte("v")); err != nil {
				t.Fatal(err)
			}
			other := newRedis(t, tg.c, &redisstore.Options{Prefix: tg.o.Prefix + "x"})
			if _, err := other.Leases().Acquire(ctx, "jobs/o", lease.NewToken(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := tg.c.Do(ctx, tg.c.B().Set().Key(tg.o.Prefix+"{jobs/%zz}:fence").Value("5").Px(time.Minute).Build()).Error(); err != nil {
				t.Fatal(err)
			}

			want := []string{"jobs/%", "jobs/*", "jobs/a", "jobs/b", "jobs/{c}"}
			var got []lease.Info
			after := ""
			for {
				page, err := l.List(ctx, "jobs/", after, 2)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > 2 {
					t.Fatalf("page of %d keys, limit 2", len(page))
				}
				got = append(got, page...)
				if len(page) < 2 {
					break
				}
				after = page[len(page)-1].Key
			}
			var gotKeys []string
			for _, info := range got {
				gotKeys = append(gotKeys, info.Key)
			}
			if !slices.Equal(gotKeys, want) {
				t.Fatalf("listed %q, want %q", gotKeys, want)
			}
			for _, info := range got {
				switch info.Key {
				case "jobs/b":
					if info.Held || info.Holder != "" || info.Fence == 0 || info.TTL != 0 {
						t.Fatalf("released key %+v, want free with its fence", info)
					}
				case "jobs/a":
					if !info.Held || info.Holder != "" || info.Fence == 0 {
						t.Fatalf("key without description %+v", info)
					}
				default:
					if !info.Held || info.Holder != "node "+info.Key || info.TTL <= 0 || info.TTL > 30*time.Second || info.Fence == 0 {
						t.Fatalf("held key %+v", info)
					}
				}
				// List reports what Inspect reports.
				in, err := s.Leases().Inspect(ctx, info.Key)
				if err != nil || in.Held != info.Held || in.Fence != info.Fence || in.Holder != info.Holder {
					t.Fatalf("Inspect(%q) = %+v, %v; List gave %+v", info.Key, in, err, info)
				}
			}
			// A literal '*' prefix matches only itself.
			if page, err := l.List(ctx, "jobs/*", "", 10); err != nil || len(page) != 1 || page[0].Key != "jobs/*" {
				t.Fatalf("List(jobs/*) = %+v, %v", page, err)
			}
			all, err := l.List(ctx, "", "", 100)
			if err != nil || len(all) != len(keys) {
				t.Fatalf("all keys: %+v, %v; want %d", all, err, len(keys))
			}
			// The grants raised their slots' fence floors, which are
			// not leases.
			if floors := scanAll(t, tg.c, globEscape(tg.o.Prefix+"{")+"*"+globEscape("}:floor")); len(floors) == 0 {
				t.Fatal("no fence floor under the prefix")
			}
			if page, err := l.List(ctx, "", "jobt", 100); err != nil || len(page) != 1 || page[0].Key != "other/x" {
				t.Fatalf("after jobt: %+v, %v", page, err)
			}
			for _, bad := range []struct {
				prefix, after string
				limit         int
			}{{"", "", 0}, {"", "", lease.MaxListLimit + 1}} {
				if _, err := l.List(ctx, bad.prefix, bad.after, bad.limit); !errors.Is(err, lease.ErrInvalid) {
					t.Fatalf("List(%q, %q, %d): %v, want ErrInvalid", bad.prefix, bad.after, bad.limit, err)
				}
			}
		})
	}
}

// With the default retention (none), List reports the held keys, and a
// key that ended while its fence key lasts: until the released lock's TTL
// would have run out, and not past an expired lock's TTL.
func TestListEndedKeys(t *testing.T) {
	for _, tg := range listTargets(t, 0) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			s := tg.s
			ls := s.Leases()
			held, released, expired := "jobs/held", "jobs/released", "jobs/expired"
			for _, k := range []string{held, released} {
				if _, err := ls.Acquire(ctx, k, "tok-"+k, 30*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ls.Acquire(ctx, expired, "tok", 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx, released, "tok-"+released); err != nil {
				t.Fatal(err)
			}
			// The fence key expires with the lock (within a millisecond).
			var gone time.Time
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				info, err := ls.Inspect(ctx, expired)
				if err != nil {
					t.Fatal(err)
				}
				if !info.Held && gone.IsZero() {
					gone = time.Now()
				}
				if !info.Held && info.Fence == 0 {
					break
				}
				if !gone.IsZero() && time.Since(gone) > 500*time.Millisecond {
					t.Fatalf("an expired key still reads %+v 500ms after its lock expired: its fence key outlived it", info)
				}
				if time.Now().After(deadline) {
					t.Fatalf("a 100ms lease still held after 10s: %+v", info)
				}
			}
			want := []string{held, released}
			page, err := ls.(lease.Lister).List(ctx, "jobs/", "", 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, info := range page {
				got = append(got, info.Key)
				if info.Key == released && (info.Held || info.Fence == 0) {
					t.Fatalf("the released key lists as %+v, want free with its last fence", info)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("listed %q, want %q", got, want)
			}
		})
	}
}

// List walks every key whatever SCAN's page size, and keeps the smallest.
func TestListManyKeys(t *testing.T) {
	srv := testenv.SharedRedis(t)
	o := &redisstore.Options{Prefix: "listmany:" + rand.Text()[:8] + ":"}
	s := checked(t, newClient(t, srv.Addr()), o)
	ctx := ctxT(t)
	c := newClient(t, srv.Addr())
	// Fence keys written directly: 2500 keys, more than one SCAN step.
	const n = 2500
	var cmds rueidis.Commands
	for i := range n {
		_, fk := s.LeaseKeys(fmt.Sprintf("k%05d", i))
		cmds = append(cmds, c.B().Set().Key(fk).Value(strconv.Itoa(i+1)).Px(time.Minute).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	l := s.Leases().(lease.Lister)
	page, err := l.List(ctx, "", "k01233", 3)
	if err != nil || len(page) != 3 || page[0].Key != "k01234" || page[2].Key != "k01236" || page[0].Fence != 1235 || page[0].Held {
		t.Fatalf("page %+v, %v", page, err)
	}
	page, err = l.List(ctx, "", "", lease.MaxListLimit)
	if err != nil || len(page) != lease.MaxListLimit || page[0].Key != "k00000" || page[len(page)-1].Key != "k00999" {
		t.Fatalf("first %d: %d keys, %v", lease.MaxListLimit, len(page), err)
	}
}

// A description belongs to its grant: Inspect and HeldError report it only
// while the grant that gave it holds the key; a later grant without one (even
// with the same token) reports none; the holder key shares the lease's
// hash tag and lives exactly as long as the lock.
func TestHolderKeyFollowsGrant(t *testing.T) {
	eachClient(t, func(t *testing.T, s *redisstore.Store, c rueidis.Client) {
		ctx := ctxT(t)
		ls := s.Leases()
		ha := ls.(leasedriver.HolderAcquirer)
		k := uniq(t, "k")
		tok := lease.NewToken()
		g, err := ha.AcquireHolder(ctx, k, tok, 20*time.Second, "node-1 export")
		if err != nil {
			t.Fatal(err)
		}
		lock, _ := s.LeaseKeys(k)
		hk := lock[:len(lock)-len("lock")] + "holder"
		if v, ok := get(t, c, hk); !ok || v != strconv.FormatUint(g.Fence, 10)+" node-1 export" {
			t.Fatalf("holder key = %q, %v", v, ok)
		}
		if a, b := pttl2(t, c, hk, lock); a <= 0 || a > b+time.Millisecond || b-a > time.Second {
			t.Fatalf("holder key PTTL %v, lock PTTL %v", a, b)
		}
		var held *lease.HeldError
		if _, err := ls.Acquire(ctx, k, lease.NewToken(), time.Second); !errors.As(err, &held) || held.Holder != "node-1 export" {
			t.Fatalf("other token: %v, want a HeldError naming node-1 export", err)
		}
		if _, err := ls.Renew(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, c, hk); d <= 50*time.Second {
			t.Fatalf("holder key PTTL %v after a renewal to 1m", d)
		}
		// Re-acquiring without a description drops it.
		if _, err := ls.Acquire(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		if info, err := ls.Inspect(ctx, k); err != nil || !info.Held || info.Holder != "" {
			t.Fatalf("after a re-acquire without description: %+v, %v", info, err)
		}
		if _, ok := get(t, c, hk); ok {
			t.Fatal("holder key kept after a re-acquire without description")
		}
		// A released grant's description never shows again, not even for
		// a new grant to the same token without one.
		if _, err := ha.AcquireHolder(ctx, k, tok, time.Minute, "node-1 again"); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
		if info, err := ls.Inspect(ctx, k); err != nil || info.Held || info.Holder != "" {
			t.Fatalf("after Release: %+v, %v", info, err)
		}
		g2, err := ls.Acquire(ctx, k, tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := ls.Inspect(ctx, k); err != nil || !info.Held || info.Holder != "" || info.Fence != g2.Fence {
			t.Fatalf("new grant without description: %+v, %v", info, err)
		}
		if _, err := ls.Acquire(ctx, k, lease.NewToken(), time.Second); !errors.As(err, &held) || held.Holder != "" {
			t.Fatalf("other token: %v, want a HeldError without holder", err)
		}
		// A grant without description writes no holder key.
		k2 := uniq(t, "plain")
		if _, err := ls.Acquire(ctx, k2, lease.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
		l2, _ := s.LeaseKeys(k2)
		if _, ok := get(t, c, l2[:len(l2)-len("lock")]+"holder"); ok {
			t.Fatal("a grant without description wrote a holder key")
		}
	})
}

// eachClient runs fn on a single server's store through rueidis and
// go-redis, with a direct rueidis client.
func eachClient(t *testing.T, fn func(t *testing.T, s *redisstore.Store, c rueidis.Client)) {
	srv := testenv.SharedRedis(t)
	t.Run("rueidis", func(t *testing.T) { fn(t, checked(t, newClient(t, srv.Addr()), nil), newClient(t, srv.Addr())) })
	t.Run("goredis", func(t *testing.T) { fn(t, checkedGo(t, newGoClient(t, srv.Addr()), nil), newClient(t, srv.Addr())) })
}
