package redisstore_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/lease/leasetest"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/store/redisstore"
)

// endedHooks reaches what s's lease view keeps of ended leases
// (leasetest.Ended) through dc, a direct client of the same server or
// cluster.
func endedHooks(s *redisstore.Store, dc rueidis.Client) *leasetest.Ended {
	return &leasetest.Ended{
		Reclaim: func(t *testing.T) { reclaim(t, s, dc) },
		Keys: func(t *testing.T, prefix string) []string {
			var keys []string
			for _, r := range leaseRecords(t, s, dc, prefix) {
				if i, found := slices.BinarySearch(keys, r.key); !found {
					keys = slices.Insert(keys, i, r.key)
				}
			}
			return keys
		},
		Raise: func(t *testing.T, key string, f uint64) { raiseFence(t, s, dc, key, f) },
	}
}

// record is a key the store keeps for one lease key.
type record struct {
	raw  string // the Redis key
	key  string // the lease key, decoded
	kind string // what follows the hash tag: lock, fence, holder, queue, stays
}

// unescapeTag undoes the store's percent-encoding of '%', '{' and '}'.
var unescapeTag = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// globEscape escapes the SCAN MATCH pattern characters of s.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// scanAll returns the keys matching pattern on every node of c, each once.
func scanAll(t testing.TB, c rueidis.Client, pattern string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, n := range c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctxT(t), n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("SCAN %s: %v", pattern, err)
			}
			for _, k := range e.Elements {
				if !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out
}

// leaseRecords returns every key the store keeps for the lease keys that
// begin with prefix: every <prefix>{<key>}:<kind> key except the fence
// floors (shared by a hash slot) and fenced resources' values and admitted
// fences (the guard's, not the lease's).
func leaseRecords(t testing.TB, s *redisstore.Store, c rueidis.Client, prefix string) []record {
	t.Helper()
	sp := s.KeyPrefix() + "{"
	var out []record
	for _, raw := range scanAll(t, c, globEscape(sp+escapeTag(prefix))+"*") {
		tag, kind, ok := strings.Cut(strings.TrimPrefix(raw, sp), "}:")
		if !ok || strings.Contains(tag, "}") {
			t.Fatalf("key %q is not in the store's shape <prefix>{<key>}:<kind>", raw)
		}
		switch kind {
		case "floor", "value", "admitted":
			continue
		}
		if k := unescapeTag.Replace(tag); strings.HasPrefix(k, prefix) {
			out = append(out, record{raw: raw, key: k, kind: kind})
		}
	}
	return out
}

// escapeTag percent-encodes '%', '{' and '}' as the store does.
func escapeTag(s string) string {
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(s)
}

// reclaim waits until the server expired every record of every lease key
// whose lock is gone: each such record with a TTL is polled with PTTL
// (which expires a key past its time on the spot) until it is gone. A
// record without a TTL never goes; it is left for Keys to report.
func reclaim(t *testing.T, s *redisstore.Store, c rueidis.Client) {
	t.Helper()
	ctx := ctxT(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		byKey := map[string][]record{}
		for _, r := range leaseRecords(t, s, c, "") {
			byKey[r.key] = append(byKey[r.key], r)
		}
		var left []string
		for k, rs := range byKey {
			lock, _ := s.LeaseKeys(k)
			n, err := c.Do(ctx, c.B().Exists().Key(lock).Build()).AsInt64()
			if err != nil {
				t.Fatalf("EXISTS %s: %v", lock, err)
			}
			if n == 1 {
				continue // held
			}
			for _, r := range rs {
				if d := pttl(t, c, r.raw); d >= 0 {
					left = append(left, r.raw)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("records of ended leases still not expired after 30s: %q", left[:min(len(left), 5)])
		}
	}
}

// raiseFence sets the fence of key, held, to f (keeping its fence key's
// TTL) and the fence floor of its hash slot to f, as a grant made while
// the server's clock ran far ahead would have left both.
func raiseFence(t *testing.T, s *redisstore.Store, c rueidis.Client, key string, f uint64) {
	t.Helper()
	ctx := ctxT(t)
	_, fk := s.LeaseKeys(key)
	v := strconv.FormatUint(f, 10)
	if err := c.Do(ctx, c.B().Set().Key(fk).Value(v).Xx().Keepttl().Build()).Error(); err != nil {
		t.Fatalf("SET %s %s XX KEEPTTL: %v", fk, v, err)
	}
	if err := c.Do(ctx, c.B().Set().Key(s.FenceFloorKey(key)).Value(v).Build()).Error(); err != nil {
		t.Fatalf("SET %s %s: %v", s.FenceFloorKey(key), v, err)
	}
}

// floorTargets are a fresh single server and the shared cluster, each with
// a store under a prefix of its own (o gives the other options) and a
// direct client.
func floorTargets(t *testing.T, o redisstore.Options) []struct {
	name string
	s    *redisstore.Store
	c    rueidis.Client
} {
	srv := testenv.Redis(t, nil)
	cl := testenv.SharedRedisCluster(t)
	type tg = struct {
		name string
		s    *redisstore.Store
		c    rueidis.Client
	}
	opts := func() *redisstore.Options {
		o := o
		o.Prefix = "floortest:" + rand.Text()[:8] + ":"
		return &o
	}
	return []tg{
		{"single", checked(t, newClient(t, srv.Addr()), opts()), newClient(t, srv.Addr())},
		{"cluster", checked(t, newClusterClient(t, cl.Addrs(), nil), opts()), newClusterClient(t, cl.Addrs(), nil)},
	}
}

// waitReleased polls the store's own judgement until key is free.
func waitReleased(t *testing.T, ls lease.Store, key string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := ls.Inspect(ctxT(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held after 10s: %+v", key, info)
		}
	}
}

// Once leases end (released, expired, queued and left) and the server has
// expired what they kept, the store keeps only the fence floors of the
// hash slots they used: one key per slot, however many keys shared it.
func TestEndedLeasesKeepOnlyFloors(t *testing.T) {
	for _, tg := range floorTargets(t, redisstore.Options{}) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			s, c := tg.s, tg.c
			ls := s.Leases()
			slots := map[int]bool{}
			var keys []string
			// 200 keys over (almost) as many slots, and 200 keys in 4 slots.
			for i := range 200 {
				keys = append(keys, fmt.Sprintf("spread/%d", i))
			}
			few := map[int]bool{}
			for i := 0; len(keys) < 400; i++ {
				k := fmt.Sprintf("few/%d", i)
				sl := testenv.KeySlot(k)
				if len(few) < 4 {
					few[sl] = true
				}
				if few[sl] {
					keys = append(keys, k)
				}
			}
			// Released leases leave their fence keys to their TTL.
			var expired []string
			for i, k := range keys {
				slots[testenv.KeySlot(k)] = true
				tok := lease.NewToken()
				switch {
				case i%10 == 9: // runs out
					if _, err := ls.Acquire(ctx, k, tok, 100*time.Millisecond); err != nil {
						t.Fatal(err)
					}
					expired = append(expired, k)
					continue
				case i%2 == 1: // with a holder description
					if _, err := ls.(leasedriver.HolderAcquirer).AcquireHolder(ctx, k, tok, 5*time.Second, "node "+k); err != nil {
						t.Fatal(err)
					}
				default:
					if _, err := ls.Acquire(ctx, k, tok, 5*time.Second); err != nil {
						t.Fatal(err)
					}
				}
				if i%50 == 0 {
					// A waiter queues and leaves.
					var held *lease.HeldError
					w := lease.NewToken()
					if _, err := ls.(leasedriver.Queuer).AcquireQueued(ctx, k, w, 5*time.Second, "", 5*time.Second); !errors.As(err, &held) {
						t.Fatalf("a waiter on a held key: %v", err)
					}
					if err := ls.(leasedriver.Queuer).Leave(ctx, k, w); err != nil {
						t.Fatal(err)
					}
				}
				if err := ls.Release(ctx, k, tok); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range expired {
				waitReleased(t, ls, k)
			}
			reclaim(t, s, c)
			left := scanAll(t, c, globEscape(s.KeyPrefix())+"*")
			if len(left) > len(slots) {
				t.Fatalf("%d leases over %d hash slots ended, and %d keys are left (%q...), want at most one per slot", len(keys), len(slots), len(left), left[:min(len(left), 5)])
			}
			floors := map[int]bool{}
			for _, k := range left {
				if !strings.HasSuffix(k, "}:floor") {
					t.Fatalf("key %q left after every lease ended, want only fence floors", k)
				}
				floors[testenv.KeySlot(k)] = true
			}
			if len(floors) != len(left) {
				t.Fatalf("%d fence floors in %d slots, want one per slot", len(left), len(floors))
			}
			for sl := range slots {
				if !floors[sl] {
					t.Fatalf("slot %d was used and has no fence floor (floors in %d of %d slots)", sl, len(floors), len(slots))
				}
			}
			if len(slots) > 210 {
				t.Fatalf("the keys used %d slots, want at most 204: the test does not show floors bounded by slots", len(slots))
			}
		})
	}
}

// A new fence is above the fence floor of its key's hash slot, whatever
// key raised it, and the grant raises the floor to the new fence, also
// when the fence comes from a kept fence key above the floor, from a
// re-acquire whose fence key was lost, or from a slot claim. A key in
// another slot is not held back by it.
func TestFenceFloor(t *testing.T) {
	for _, tg := range floorTargets(t, redisstore.Options{FenceRetention: time.Hour}) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			s, c := tg.s, tg.c
			ls := s.Leases()
			floor := func(k string) uint64 {
				t.Helper()
				v, ok := get(t, c, s.FenceFloorKey(k))
				if !ok {
					t.Fatalf("no fence floor for %q", k)
				}
				f, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			setFloor := func(k string, f uint64) {
				t.Helper()
				if err := c.Do(ctx, c.B().Set().Key(s.FenceFloorKey(k)).Value(strconv.FormatUint(f, 10)).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			acquire := func(k, tok string) uint64 {
				t.Helper()
				g, err := ls.Acquire(ctx, k, tok, time.Minute)
				if err != nil {
					t.Fatalf("Acquire(%q): %v", k, err)
				}
				if f := floor(k); f != g.Fence {
					t.Fatalf("after a grant of fence %d to %q the floor is %d, want the grant's", g.Fence, k, f)
				}
				return g.Fence
			}
			a := uniq(t, "a")
			var b, other string // b shares a's slot, other does not
			for i := 0; b == "" || other == ""; i++ {
				k := a + "/" + strconv.Itoa(i)
				if testenv.KeySlot(k) == testenv.KeySlot(a) {
					b = k
				} else if other == "" {
					other = k
				}
			}
			if s.FenceFloorKey(a) != s.FenceFloorKey(b) || s.FenceFloorKey(a) == s.FenceFloorKey(other) {
				t.Fatalf("floors %s, %s, %s: want one per slot", s.FenceFloorKey(a), s.FenceFloorKey(b), s.FenceFloorKey(other))
			}
			fa := acquire(a, "tok-a")
			ahead := fa + uint64(time.Hour/time.Microsecond)
			setFloor(a, ahead)
			if f := acquire(b, "tok-b"); f != ahead+1 {
				t.Fatalf("fence %d in a slot whose floor is %d, want %d", f, ahead, ahead+1)
			}
			if f := acquire(other, "tok-o"); f >= ahead {
				t.Fatalf("fence %d in another slot, held back by a floor it does not share", f)
			}
			// A kept fence key above the floor: the grant follows it and
			// raises the floor, which carries it once the key is gone.
			if err := ls.Release(ctx, a, "tok-a"); err != nil {
				t.Fatal(err)
			}
			_, fk := s.LeaseKeys(a)
			above := ahead + 1000
			if err := c.Do(ctx, c.B().Set().Key(fk).Value(strconv.FormatUint(above, 10)).Xx().Keepttl().Build()).Error(); err != nil {
				t.Fatalf("SET %s XX KEEPTTL: %v (the release did not keep the fence key for the retention)", fk, err)
			}
			if f := acquire(a, "tok-a"); f != above+1 {
				t.Fatalf("fence %d after a kept fence %d, want %d", f, above, above+1)
			}
			if err := ls.Release(ctx, a, "tok-a"); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(ctx, c.B().Del().Key(fk).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if f := acquire(a, "tok-a"); f != above+2 {
				t.Fatalf("fence %d once the fence key %d was gone, want %d", f, above+1, above+2)
			}
			// The holder re-acquires after its fence key was lost.
			if err := c.Do(ctx, c.B().Del().Key(fk).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			setFloor(a, above+100)
			if f := acquire(a, "tok-a"); f != above+101 {
				t.Fatalf("re-acquire without a fence key: fence %d, want %d", f, above+101)
			}
			// Slot claims share the job's slot floor.
			claims := s.Schedules().(interface{ Claims() lease.Store }).Claims()
			job := "floorjob" + strconv.FormatInt(time.Now().UnixNano(), 36)
			g, err := claims.Acquire(ctx, scheddriver.ClaimKey(job, "1"), "tok-c", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			jobFloor := "sched:" + job // the job's hash tag
			if f := floor(jobFloor); f != g.Fence {
				t.Fatalf("claim fence %d, job slot floor %d", g.Fence, f)
			}
			// An hour ahead: the server's clock cannot pass it meanwhile,
			// however slow the machine.
			raised := g.Fence + uint64(time.Hour/time.Microsecond)
			setFloor(jobFloor, raised)
			if g2, err := claims.Acquire(ctx, scheddriver.ClaimKey(job, "2"), "tok-c", time.Minute); err != nil || g2.Fence != raised+1 {
				t.Fatalf("claim under a raised floor: %+v, %v; want fence %d", g2, err, raised+1)
			}
		})
	}
}

// A waiter that leaves takes its stay with it: the queue's keys then
// expire with the longest stay left, not the leaver's.
func TestLeaveShortensQueue(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := checked(t, c, nil)
	q := s.Leases().(leasedriver.Queuer)
	k := uniq(t, "k")
	if _, err := s.Leases().Acquire(ctx, k, lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	long, short := lease.NewToken(), lease.NewToken()
	var held *lease.HeldError
	if _, err := q.AcquireQueued(ctx, k, long, time.Minute, "", time.Minute); !errors.As(err, &held) {
		t.Fatalf("first waiter: %v", err)
	}
	if _, err := q.AcquireQueued(ctx, k, short, time.Minute, "", 2*time.Second); !errors.As(err, &held) || held.Position != 1 {
		t.Fatalf("second waiter: %v", err)
	}
	lock, _ := s.LeaseKeys(k)
	base := strings.TrimSuffix(lock, "lock")
	for _, key := range []string{base + "queue", base + "stays"} {
		if d := pttl(t, c, key); d <= 50*time.Second {
			t.Fatalf("%s PTTL %v with a waiter staying 1m", key, d)
		}
	}
	if err := q.Leave(ctx, k, long); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{base + "queue", base + "stays"} {
		// The stays are kept in microseconds; the expiry is rounded up to
		// the millisecond.
		if d := pttl(t, c, key); d <= 0 || d > 2*time.Second+5*time.Millisecond {
			t.Fatalf("%s PTTL %v after the 1m waiter left, want the 2s stay left", key, d)
		}
	}
	if err := q.Leave(ctx, k, short); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(base+"queue", base+"stays").Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("%d of the queue's keys kept after every waiter left (%v)", n, err)
	}
}
