package redisstore_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// wantReleasePath is "delex" if the server knows DELEX, else "lua".
func wantReleasePath(t *testing.T, c rueidis.Client) string {
	t.Helper()
	arr, err := c.Do(ctxT(t), c.B().CommandInfo().CommandName("DELEX").Build()).ToArray()
	if err != nil || len(arr) != 1 {
		t.Fatalf("COMMAND INFO DELEX: %v, %v", arr, err)
	}
	if arr[0].IsNil() {
		return redisstore.ReleaseLua
	}
	return redisstore.ReleaseDelex
}

func serverVersion(t *testing.T, c rueidis.Client) string {
	t.Helper()
	info, err := c.Do(ctxT(t), c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no redis_version in INFO server")
	return ""
}

// TestReleasePath: the machine's Redis 7.0 has no DELEX, so releases use the
// compare-and-delete script; a release with the wrong token leaves the
// owner's lock in place.
func TestReleasePath(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := newRedis(t, c, nil)
	want := wantReleasePath(t, c)
	if v := serverVersion(t, c); strings.HasPrefix(v, "7.") && want != redisstore.ReleaseLua {
		t.Fatalf("Redis %s reports DELEX", v)
	}
	if p, err := s.ReleasePath(ctx); err != nil || p != want {
		t.Fatalf("ReleasePath = %q, %v; want %q", p, err, want)
	}
	k := uniq(t, "k")
	owner := lease.NewToken()
	g, err := s.Leases().Acquire(ctx, k, owner, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lock, fk := s.LeaseKeys(k)
	if err := s.Leases().Release(ctx, k, lease.NewToken()); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("release with the wrong token: %v, want ErrNotHeld", err)
	}
	if v, ok := get(t, c, lock); !ok || v != owner {
		t.Fatal("a release with the wrong token changed the owner's lock")
	}
	if d := pttl(t, c, lock); d <= 20*time.Second {
		t.Fatalf("lock PTTL %v after a wrong release", d)
	}
	if err := s.Leases().Release(ctx, k, owner); err != nil {
		t.Fatalf("owner's release: %v", err)
	}
	if _, ok := get(t, c, lock); ok {
		t.Fatal("lock still stored after the owner's release")
	}
	// Either path leaves the fence key to expire at the lock's time (the
	// default retention is none), and Inspect reports the last fence
	// meanwhile.
	if d := pttl(t, c, fk); d <= 0 || d > 30*time.Second {
		t.Fatalf("fence key PTTL %v after release, want at most the lock's remaining TTL", d)
	}
	if info, err := s.Leases().Inspect(ctx, k); err != nil || info.Held || info.Fence != g.Fence {
		t.Fatalf("Inspect after release = %+v, %v; want free with fence %d", info, err, g.Fence)
	}
	// The next grant's fence is above the released one's all the same.
	if g2, err := s.Leases().Acquire(ctx, k, owner, 30*time.Second); err != nil || g2.Fence <= g.Fence {
		t.Fatalf("acquire after release: %+v, %v; want a fence above %d", g2, err, g.Fence)
	}
	if err := s.Leases().Release(ctx, k, owner); err != nil {
		t.Fatal(err)
	}
}

// TestRedisReleaseScenario is the release that must not delete someone
// else's lock: A's 100ms lease
// really expires, B acquires, A's compare-and-delete deletes nothing, B's
// token is still stored, B's release deletes the lock.
func TestRedisReleaseScenario(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := checked(t, c, nil)
	ls := s.Leases()
	k := uniq(t, "redis-release")
	lock, _ := s.LeaseKeys(k)
	a, b := lease.NewToken(), lease.NewToken()
	ga, err := ls.Acquire(ctx, k, a, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the server to expire A's lock (its judgement, not ours).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := ls.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's 100ms lease still held: %+v", info)
		}
	}
	if _, ok := get(t, c, lock); ok {
		t.Fatal("the server still stores A's expired lock")
	}
	gb, err := ls.Acquire(ctx, k, b, 30*time.Second)
	if err != nil {
		t.Fatalf("B's acquire: %v", err)
	}
	if gb.Fence <= ga.Fence {
		t.Fatalf("B's fence %d not above A's %d", gb.Fence, ga.Fence)
	}
	if err := ls.Release(ctx, k, a); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("stale release by A: %v, want ErrNotHeld", err)
	}
	if v, ok := get(t, c, lock); !ok || v != b {
		t.Fatal("A's stale release disturbed B's lock")
	}
	if err := ls.Release(ctx, k, b); err != nil {
		t.Fatalf("B's release: %v", err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(lock).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("EXISTS lock after B's release = %d, %v", n, err)
	}
}

// TestEvictionPolicyRefused: a server that evicts keys is refused before
// anything is written, unless AllowEviction.
func TestEvictionPolicyRefused(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, &testenv.RedisOptions{MaxMemoryPolicy: "allkeys-lru"})
	c := newClient(t, srv.Addr())
	s := newRedis(t, c, nil)
	k := "k"
	tok := lease.NewToken()
	err := s.Check(ctx)
	if !errors.Is(err, redisstore.ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("Check: %v, want ErrEvictionPolicy naming allkeys-lru", err)
	}
	if errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Check: %v is not a transport failure", err)
	}
	calls := map[string]func() error{
		"Acquire": func() error { _, err := s.Leases().Acquire(ctx, k, tok, time.Minute); return err },
		"Renew":   func() error { _, err := s.Leases().Renew(ctx, k, tok, time.Minute); return err },
		"Release": func() error { return s.Leases().Release(ctx, k, tok) },
		"FencedSet": func() error {
			return s.FencedSet(ctx, "r", 1, []byte("v"))
		},
		"FencedSetAtLeast": func() error {
			return s.FencedSetAtLeast(ctx, "r", 1, []byte("v"))
		},
		"ReleasePath": func() error { _, err := s.ReleasePath(ctx); return err },
		"Locker": func() error {
			_, err := leasetest.NewLocker(t, s.Leases(), nil).TryAcquire(ctx, k, time.Minute)
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, redisstore.ErrEvictionPolicy) {
			t.Errorf("%s: %v, want ErrEvictionPolicy", name, err)
		}
	}
	if n := dbsize(t, c); n != 0 {
		t.Fatalf("%d keys written to an evicting server", n)
	}
	// Reads still work.
	if info, err := s.Leases().Inspect(ctx, k); err != nil || info.Held {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}

	// Opting in.
	allow := newRedis(t, c, &redisstore.Options{AllowEviction: true})
	if err := allow.Check(ctx); err != nil {
		t.Fatalf("Check with AllowEviction: %v", err)
	}
	g, err := allow.Leases().Acquire(ctx, k, tok, time.Minute)
	if err != nil {
		t.Fatalf("Acquire with AllowEviction: %v", err)
	}
	if err := allow.FencedSet(ctx, "r", g.Fence, []byte("v")); err != nil {
		t.Fatalf("FencedSet with AllowEviction: %v", err)
	}
	// Lock, fence, the slot's fence floor, value and admitted fence.
	if n := dbsize(t, c); n != 5 {
		t.Fatalf("%d keys after an acquire and a fenced set with AllowEviction, want 5", n)
	}
}

// TestCheckRunsAgain: an explicit Check notices a policy changed at runtime
// and stops writes until the server is fixed; the next write checks again.
func TestCheckRunsAgain(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	s := newRedis(t, c, nil)
	setPolicy := func(p string) {
		t.Helper()
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", p).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Leases().Acquire(ctx, "a", lease.NewToken(), time.Minute); err != nil {
		t.Fatalf("first acquire (runs the check): %v", err)
	}
	setPolicy("volatile-lru")
	if err := s.Check(ctx); !errors.Is(err, redisstore.ErrEvictionPolicy) || !strings.Contains(err.Error(), "volatile-lru") {
		t.Fatalf("Check after CONFIG SET volatile-lru: %v", err)
	}
	if _, err := s.Leases().Acquire(ctx, "b", lease.NewToken(), time.Minute); !errors.Is(err, redisstore.ErrEvictionPolicy) {
		t.Fatalf("acquire after a failed check: %v, want ErrEvictionPolicy", err)
	}
	lock, fk := s.LeaseKeys("b")
	if n, err := c.Do(ctx, c.B().Exists().Key(lock, fk).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("refused acquire wrote %d keys (%v)", n, err)
	}
	setPolicy("noeviction")
	if _, err := s.Leases().Acquire(ctx, "b", lease.NewToken(), time.Minute); err != nil {
		t.Fatalf("acquire after the server was fixed: %v", err)
	}
}

// TestOutOfMemory: a full noeviction server refuses new grants and fenced
// writes with ErrOutOfMemory and writes nothing; holders can still renew and
// release.
func TestOutOfMemory(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, &testenv.RedisOptions{MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.Addr())
	s := checked(t, c, nil)
	ls := s.Leases()
	holder := lease.NewToken()
	gh, err := ls.Acquire(ctx, "held", holder, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FencedSet(ctx, "res", 5, []byte("v5")); err != nil {
		t.Fatal(err)
	}
	// Fill the server with 1MB, then cap it at 1mb: clearly over the
	// limit, whatever its connection buffers do.
	blob := strings.Repeat("x", 16<<10)
	for i := 0; i < 64; i++ {
		if err := c.Do(ctx, c.B().Set().Key("fill:"+strconv.Itoa(i)).Value(blob).Build()).Error(); err != nil {
			t.Fatalf("filling: %v", err)
		}
	}
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1mb").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Set().Key("tiny").Value("x").Build()).Error(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a plain SET on the full server: %v, want OOM", err)
	}

	tok := lease.NewToken()
	_, err = ls.Acquire(ctx, "new", tok, 10*time.Second)
	if !errors.Is(err, redisstore.ErrOutOfMemory) || errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire on a full server: %v, want ErrOutOfMemory", err)
	}
	if !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("error %q does not carry the server's reply", err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Fatal("error contains the token")
	}
	if info, err := ls.Inspect(ctx, "new"); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Inspect after a refused acquire: %+v, %v", info, err)
	}
	lock, fk := s.LeaseKeys("new")
	if n, err := c.Do(ctx, c.B().Exists().Key(lock, fk).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("refused acquire left %d keys (%v)", n, err)
	}
	if l, err := leasetest.NewLocker(t, ls, nil).TryAcquire(ctx, "new", time.Second); !errors.Is(err, redisstore.ErrOutOfMemory) {
		t.Fatalf("Locker on a full server: %v, %v", l, err)
	}
	if err := s.FencedSet(ctx, "res", 6, []byte("v6")); !errors.Is(err, redisstore.ErrOutOfMemory) {
		t.Fatalf("FencedSet on a full server: %v", err)
	}
	if v, f, err := s.FencedGet(ctx, "res"); err != nil || string(v) != "v5" || f != 5 {
		t.Fatalf("FencedGet = %q, %d, %v; want v5, 5", v, f, err)
	}

	// The holder keeps and ends its lease.
	if g, err := ls.Renew(ctx, "held", holder, 40*time.Second); err != nil || g.Fence != gh.Fence {
		t.Fatalf("Renew on a full server: %+v, %v", g, err)
	}
	if err := ls.Release(ctx, "held", holder); err != nil {
		t.Fatalf("Release on a full server: %v", err)
	}
	if info, err := ls.Inspect(ctx, "held"); err != nil || info.Held || info.Fence != gh.Fence {
		t.Fatalf("Inspect after release: %+v, %v", info, err)
	}

	// Once the server has room again, grants resume.
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "new", tok, 10*time.Second); err != nil {
		t.Fatalf("Acquire after memory was freed: %v", err)
	}
}

// TestFencedSet: strict and at-least admission, what is stored, and exact
// comparison over the whole uint64 range.
func TestFencedSet(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := checked(t, c, nil)
	r := uniq(t, "r")
	vk, fk := s.ValueKeys(r)
	stored := func(wantV string, wantF uint64) {
		t.Helper()
		if v, ok := get(t, c, vk); !ok || v != wantV {
			t.Fatalf("value key = %q (%v), want %q", v, ok, wantV)
		}
		if v, ok := get(t, c, fk); !ok || v != strconv.FormatUint(wantF, 10) {
			t.Fatalf("admitted key = %q (%v), want %d", v, ok, wantF)
		}
		if d := pttl(t, c, vk); d != -time.Millisecond {
			t.Fatalf("value key has an expiry (%v)", d)
		}
		if v, f, err := s.FencedGet(ctx, r); err != nil || string(v) != wantV || f != wantF {
			t.Fatalf("FencedGet = %q, %d, %v; want %q, %d", v, f, err, wantV, wantF)
		}
	}
	stale := func(err error, f, cur uint64) {
		t.Helper()
		var se *fence.StaleError
		if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Fence != f || se.Current != cur || se.Resource != r {
			t.Fatalf("err = %#v (%v), want StaleError{%q, %d, %d}", err, err, r, f, cur)
		}
	}

	if v, f, err := s.FencedGet(ctx, r); err != nil || v != nil || f != 0 {
		t.Fatalf("FencedGet before any write = %q, %d, %v", v, f, err)
	}
	stale(s.FencedSet(ctx, r, 0, []byte("zero")), 0, 0)
	if _, ok := get(t, c, vk); ok {
		t.Fatal("a refused write stored a value")
	}
	if err := s.FencedSet(ctx, r, 9, []byte("a")); err != nil {
		t.Fatal(err)
	}
	stored("a", 9)
	// 10 > 9 although "10" < "9" as strings.
	if err := s.FencedSet(ctx, r, 10, []byte("b")); err != nil {
		t.Fatal(err)
	}
	stored("b", 10)
	stale(s.FencedSet(ctx, r, 10, []byte("c")), 10, 10)
	stale(s.FencedSet(ctx, r, 9, []byte("c")), 9, 10)
	stored("b", 10)
	if err := s.FencedSetAtLeast(ctx, r, 10, []byte("c")); err != nil {
		t.Fatalf("equal fence at-least: %v", err)
	}
	stored("c", 10)
	stale(s.FencedSetAtLeast(ctx, r, 9, []byte("d")), 9, 10)
	stored("c", 10)

	// Beyond 2^53 doubles cannot tell neighbours apart; the guard must.
	big := uint64(1) << 53
	if err := s.FencedSet(ctx, r, big, []byte("e")); err != nil {
		t.Fatal(err)
	}
	if err := s.FencedSet(ctx, r, big+1, []byte("f")); err != nil {
		t.Fatalf("2^53+1 after 2^53: %v", err)
	}
	stale(s.FencedSet(ctx, r, big, []byte("g")), big, big+1)
	stale(s.FencedSetAtLeast(ctx, r, big, []byte("g")), big, big+1)
	if err := s.FencedSet(ctx, r, math.MaxUint64-1, []byte("h")); err != nil {
		t.Fatal(err)
	}
	stale(s.FencedSet(ctx, r, math.MaxUint64-2, []byte("i")), math.MaxUint64-2, math.MaxUint64-1)
	if err := s.FencedSet(ctx, r, math.MaxUint64, []byte("j")); err != nil {
		t.Fatal(err)
	}
	stored("j", math.MaxUint64)

	// Binary values round-trip.
	r2 := uniq(t, "bin")
	bin := []byte{0, 0xff, '\r', '\n', 0xfe, 'x'}
	if err := s.FencedSet(ctx, r2, 1, bin); err != nil {
		t.Fatal(err)
	}
	if v, f, err := s.FencedGet(ctx, r2); err != nil || string(v) != string(bin) || f != 1 {
		t.Fatalf("binary value = %q, %d, %v", v, f, err)
	}
	// A plain SET of the value key (the unguarded path) is visible and
	// keeps the admitted fence.
	if err := c.Do(ctx, c.B().Set().Key(vk).Value("plain").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	stored("plain", math.MaxUint64)
}

// TestInvalidInputWritesNothing: bad names are refused before anything is
// sent.
func TestInvalidInputWritesNothing(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	s := checked(t, c, nil)
	long := strings.Repeat("r", lease.MaxKeyLen+1)
	for _, name := range []string{"", long, "\xff\xfe", "a\x00b"} {
		if err := s.FencedSet(ctx, name, 1, []byte("v")); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("FencedSet(%q): %v, want ErrInvalid", name, err)
		}
		if err := s.FencedSetAtLeast(ctx, name, 1, []byte("v")); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("FencedSetAtLeast(%q): %v, want ErrInvalid", name, err)
		}
		if _, _, err := s.FencedGet(ctx, name); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("FencedGet(%q): %v, want ErrInvalid", name, err)
		}
		if _, err := s.Leases().Acquire(ctx, name, lease.NewToken(), time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Acquire(%q): %v, want ErrInvalid", name, err)
		}
	}
	if err := s.HolderSet(ctx, nil, "r", []byte("v")); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("HolderSet(nil lease): %v, want ErrInvalid", err)
	}
	for _, tok := range []string{"", strings.Repeat("t", lease.MaxTokenLen+1)} {
		if _, err := s.Leases().Acquire(ctx, "k", tok, time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Acquire with a bad token: %v", err)
		}
		if _, err := s.Leases().Renew(ctx, "k", tok, time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Renew with a bad token: %v", err)
		}
		if err := s.Leases().Release(ctx, "k", tok); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Release with a bad token: %v", err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, lease.MaxTTL + time.Millisecond} {
		if _, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), ttl); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Acquire ttl %v: %v", ttl, err)
		}
		if _, err := s.Leases().Renew(ctx, "k", lease.NewToken(), ttl); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Renew ttl %v: %v", ttl, err)
		}
	}
	if n := dbsize(t, c); n != 0 {
		t.Fatalf("invalid calls wrote %d keys", n)
	}
}

// TestLayout: the documented key names, values and expiries.
func TestLayout(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())

	s := checked(t, c, nil)
	tok := lease.NewToken()
	granting := serverMillis(t, c)
	g, err := s.Leases().Acquire(ctx, "report:tenant-42", tok, 1500*time.Microsecond+10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	granted := serverMillis(t, c)
	if g.TTL != 10*time.Second+2*time.Millisecond {
		t.Fatalf("granted TTL %v, want the asked TTL rounded up to whole ms", g.TTL)
	}
	if v, ok := get(t, c, "tenure:{report:tenant-42}:lock"); !ok || v != tok {
		t.Fatal("lock key tenure:{report:tenant-42}:lock does not hold the token")
	}
	if v, ok := get(t, c, "tenure:{report:tenant-42}:fence"); !ok || v != strconv.FormatUint(g.Fence, 10) {
		t.Fatalf("fence key = %q, want %d", v, g.Fence)
	}
	if d := pttl(t, c, "tenure:{report:tenant-42}:lock"); d <= 9*time.Second || d > g.TTL {
		t.Fatalf("lock PTTL %v", d)
	}
	// The fence key lives as long as the lock (no retention): written
	// after it in the same script, it expires no earlier, and no later
	// than the grant's TTL after the server's clock read once it returned
	// (absolute expiries: a PTTL read depends on when the server runs it).
	if l, f := expireTimes(t, c, "tenure:{report:tenant-42}:lock", "tenure:{report:tenant-42}:fence"); l < granting+g.TTL.Milliseconds()-1 || f < l || f > granted+g.TTL.Milliseconds() {
		t.Fatalf("lock expires at %d, fence at %d, granted between server times %d and %d ms with TTL %v: want the fence with the lock", l, f, granting, granted, g.TTL)
	}
	// The fence floor of the key's hash slot: {n} for the smallest n that
	// hashes to that slot, the grant's fence, no expiry.
	floor := "tenure:{" + strconv.Itoa(firstTagOfSlot(testenv.KeySlot("{report:tenant-42}"))) + "}:floor"
	if v, ok := get(t, c, floor); !ok || v != strconv.FormatUint(g.Fence, 10) {
		t.Fatalf("fence floor %s = %q (%v), want %d", floor, v, ok, g.Fence)
	}
	if d := pttl(t, c, floor); d != -time.Millisecond {
		t.Fatalf("fence floor PTTL %v, want none", d)
	}
	// The fence is not below the server's clock in microseconds.
	tm, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseUint(tm[0], 10, 64)
	if now := sec * 1e6; g.Fence < now-10e6 || g.Fence > now+1e6 {
		t.Fatalf("fence %d is not the server clock in µs (%d)", g.Fence, now)
	}
	// Renewing moves both expiries forward.
	if err := c.Do(ctx, c.B().Pexpire().Key("tenure:{report:tenant-42}:fence").Milliseconds(1000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	before := serverMillis(t, c)
	if _, err := s.Leases().Renew(ctx, "report:tenant-42", tok, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	after := serverMillis(t, c)
	// Absolute expiries, judged on the server's clock read around the
	// renewal (a PTTL read depends on when the server runs the read).
	l, f := expireTimes(t, c, "tenure:{report:tenant-42}:lock", "tenure:{report:tenant-42}:fence")
	if l < before+20000 || l > after+20000 || f < l || f > after+20000 {
		t.Fatalf("after renew to 20s between server times %d and %d ms: lock expires at %d, fence at %d; want both 20s after the renewal, the fence not before the lock", before, after, l, f)
	}
	if err := s.FencedSet(ctx, "report:tenant-42", g.Fence, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, c, "tenure:{report:tenant-42}:value"); !ok || v != "done" {
		t.Fatalf("value key = %q", v)
	}
	if v, ok := get(t, c, "tenure:{report:tenant-42}:admitted"); !ok || v != strconv.FormatUint(g.Fence, 10) {
		t.Fatalf("admitted key = %q", v)
	}

	// Prefix and retention options; braces and '%' are encoded so the hash
	// tag is exactly the name.
	o := &redisstore.Options{Prefix: "app{1}:", FenceRetention: time.Hour}
	s2 := checked(t, c, o)
	g2, err := s2.Leases().Acquire(ctx, "}a{b%", tok, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, c, "app%7B1%7D:{%7Da%7Bb%25}:lock"); !ok || v != tok {
		t.Fatal("encoded lock key missing")
	}
	if d := pttl(t, c, "app%7B1%7D:{%7Da%7Bb%25}:fence"); d <= time.Hour || d > time.Hour+10*time.Second {
		t.Fatalf("fence PTTL %v with a 1h retention", d)
	}
	floor2 := "app%7B1%7D:{" + strconv.Itoa(firstTagOfSlot(testenv.KeySlot("{%7Da%7Bb%25}"))) + "}:floor"
	if v, ok := get(t, c, floor2); !ok || v != strconv.FormatUint(g2.Fence, 10) {
		t.Fatalf("fence floor %s = %q (%v), want %d", floor2, v, ok, g2.Fence)
	}
	// The encoding is injective: "%7Da{b%25" is another lease.
	if _, err := s2.Leases().Acquire(ctx, "%7Da{b%25", lease.NewToken(), 10*time.Second); err != nil {
		t.Fatalf("a key that looks encoded collided: %v", err)
	}
	if info, err := s2.Leases().Inspect(ctx, "}a{b%"); err != nil || !info.Held || info.Fence != g2.Fence {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	// A release leaves the fence key to the lock's TTL and the retention,
	// and Inspect reports the last fence.
	if err := s2.Leases().Release(ctx, "}a{b%", tok); err != nil {
		t.Fatal(err)
	}
	if d := pttl(t, c, "app%7B1%7D:{%7Da%7Bb%25}:fence"); d <= time.Hour || d > time.Hour+10*time.Second {
		t.Fatalf("fence PTTL %v after a release with a 1h retention", d)
	}
	if info, err := s2.Leases().Inspect(ctx, "}a{b%"); err != nil || info.Held || info.Fence != g2.Fence {
		t.Fatalf("Inspect after release = %+v, %v; want free with fence %d", info, err, g2.Fence)
	}
}

// firstTagOfSlot returns the smallest number whose decimal form hashes to
// slot.
func firstTagOfSlot(slot int) int {
	for n := 0; ; n++ {
		if testenv.KeySlot(strconv.Itoa(n)) == slot {
			return n
		}
	}
}

// TestFenceKeyLost: a fence key deleted by hand (or expired) while its lock
// is held is not trusted: a renewal fails, and re-acquiring grants a new,
// higher fence from the clock floor.
func TestFenceKeyLost(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := checked(t, c, nil)
	k := uniq(t, "k")
	tok := lease.NewToken()
	g, err := s.Leases().Acquire(ctx, k, tok, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, fk := s.LeaseKeys(k)
	if err := c.Do(ctx, c.B().Del().Key(fk).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Leases().Renew(ctx, k, tok, 30*time.Second); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("renew without a fence key: %v, want ErrNotHeld", err)
	}
	g2, err := s.Leases().Acquire(ctx, k, tok, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fence <= g.Fence {
		t.Fatalf("fence %d after the fence key was lost, not above %d", g2.Fence, g.Fence)
	}
	if info, err := s.Leases().Inspect(ctx, k); err != nil || !info.Held || info.Fence != g2.Fence {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
}

// TestHolderSet: the strict holder check refuses a holder whose lease
// expired before the next holder wrote anything; a max-fence guard admits
// it.
func TestHolderSet(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	s := checked(t, c, nil)
	lk := leasetest.NewLocker(t, s.Leases(), nil)
	k := uniq(t, "k")
	r := uniq(t, "r")
	a, err := lk.TryAcquire(ctx, k, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.HolderSet(ctx, a, r, []byte("A")); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, err := s.Leases().Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's lease never expired")
		}
	}
	if err := s.HolderSet(ctx, a, r, []byte("A-late")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("expired holder's write: %v, want ErrNotHeld", err)
	}
	blind := uniq(t, "blind")
	if err := s.FencedSet(ctx, blind, a.Fence(), []byte("A-late")); err != nil {
		t.Fatalf("the max-fence guard admits A while B has not written: %v", err)
	}
	b, err := lk.TryAcquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if err := s.HolderSet(ctx, b, r, []byte("B")); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if err := s.HolderSet(ctx, b, r, []byte("B2")); err != nil {
		t.Fatalf("second write in one tenure: %v", err)
	}
	if v, f, err := s.FencedGet(ctx, r); err != nil || string(v) != "B2" || f != b.Fence() {
		t.Fatalf("stored %q/%d (%v), want B2/%d", v, f, err, b.Fence())
	}
	// A newer fence admitted elsewhere makes the holder's write stale.
	if err := s.FencedSet(ctx, r, b.Fence()+1, []byte("newer")); err != nil {
		t.Fatal(err)
	}
	var se *fence.StaleError
	if err := s.HolderSet(ctx, b, r, []byte("B3")); !errors.As(err, &se) || se.Current != b.Fence()+1 {
		t.Fatalf("holder's write below the admitted fence: %v", err)
	}
	if v, _, _ := s.FencedGet(ctx, r); string(v) != "newer" {
		t.Fatalf("stored %q after a refused write", v)
	}
}

// testKeysShareSlot: on a cluster, the lock and fence of one lease, and the
// value and admitted fence of one resource, hash to one slot, whatever the
// name contains; different names spread over the slots.
func testKeysShareSlot(t *testing.T, c rueidis.Client) {
	ctx := ctxT(t)
	s := checked(t, c, nil)
	base := uniq(t, "")
	names := []string{"plain", "}lead", "%7Dlead", "a}b", "{x}", "x{}", "{}", "ünïcode", "report:tenant-42"}
	slots := map[int64]bool{}
	keyslot := func(k string) int64 {
		t.Helper()
		n, err := c.Do(ctx, c.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", k, err)
		}
		return n
	}
	for _, name := range append(names, strings.Repeat("k", lease.MaxKeyLen-len(base))) {
		k := base + name
		if len(k) > lease.MaxKeyLen {
			k = k[:lease.MaxKeyLen]
		}
		tok := lease.NewToken()
		g, err := s.Leases().(leasedriver.HolderAcquirer).AcquireHolder(ctx, k, tok, 30*time.Second, "node "+name[:min(len(name), 20)])
		if err != nil {
			t.Fatalf("Acquire(%q): %v", k, err)
		}
		lock, fk := s.LeaseKeys(k)
		hk := strings.TrimSuffix(lock, "lock") + "holder"
		floor := s.FenceFloorKey(k)
		if a, b, h, f := keyslot(lock), keyslot(fk), keyslot(hk), keyslot(floor); a != b || a != h || a != f {
			t.Fatalf("%q: lock in slot %d, fence in slot %d, holder in slot %d, fence floor in slot %d", k, a, b, h, f)
		} else {
			slots[a] = true
		}
		if v, ok := get(t, c, floor); !ok || v != strconv.FormatUint(g.Fence, 10) {
			t.Fatalf("%q: fence floor %s = %q, want %d", k, floor, v, g.Fence)
		}
		if v, ok := get(t, c, lock); !ok || v != tok {
			t.Fatalf("%q: lock key does not hold the token", k)
		}
		if v, ok := get(t, c, fk); !ok || v != strconv.FormatUint(g.Fence, 10) {
			t.Fatalf("%q: fence key = %q, want %d", k, v, g.Fence)
		}
		if info, err := s.Leases().Inspect(ctx, k); err != nil || info.Holder != "node "+name[:min(len(name), 20)] {
			t.Fatalf("Inspect(%q) = %+v, %v; want holder %q", k, info, err, "node "+name[:min(len(name), 20)])
		}
		if err := s.FencedSet(ctx, k, g.Fence, []byte("v")); err != nil {
			t.Fatalf("FencedSet(%q): %v", k, err)
		}
		vk, ak := s.ValueKeys(k)
		if a, b := keyslot(vk), keyslot(ak); a != b {
			t.Fatalf("%q: value in slot %d, admitted fence in slot %d", k, a, b)
		}
		if err := s.Leases().Release(ctx, k, tok); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		if info, err := s.Leases().Inspect(ctx, k); err != nil || info.Held || info.Fence != g.Fence {
			t.Fatalf("Inspect(%q) = %+v, %v", k, info, err)
		}
	}
	if len(slots) < 3 {
		t.Fatalf("%d leases landed in only %d slots: the hash tag is not the name", len(names)+1, len(slots))
	}
}

// testHolderSetCluster: HolderSet works on a cluster when the resource
// shares the lease key's slot, and refuses other pairs before sending.
func testHolderSetCluster(t *testing.T, c rueidis.Client) {
	ctx := ctxT(t)
	s := checked(t, c, nil)
	k := uniq(t, "k")
	l, err := leasetest.NewLocker(t, s.Leases(), nil).TryAcquire(ctx, k, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := s.HolderSet(ctx, l, k, []byte("v")); err != nil {
		t.Fatalf("HolderSet on the lease key's own resource: %v", err)
	}
	if v, f, err := s.FencedGet(ctx, k); err != nil || string(v) != "v" || f != l.Fence() {
		t.Fatalf("stored %q/%d (%v)", v, f, err)
	}
	var other string
	for i := 0; ; i++ {
		other = k + "/other" + strconv.Itoa(i)
		if testenv.KeySlot(other) != testenv.KeySlot(k) {
			break
		}
	}
	if err := s.HolderSet(ctx, l, other, []byte("v")); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("cross-slot HolderSet: %v, want ErrInvalid", err)
	}
	if v, _, err := s.FencedGet(ctx, other); err != nil || v != nil {
		t.Fatalf("cross-slot HolderSet stored %q (%v)", v, err)
	}
}

// serverMillis is the server's clock, TIME, in Unix milliseconds.
func serverMillis(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	tm, err := c.Do(ctxT(t), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v, %v", tm, err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return sec*1000 + us/1000
}

// expireTimes returns the absolute expiries (PEXPIRETIME, Unix ms) of keys
// a and b, read in one script.
func expireTimes(t *testing.T, c rueidis.Client, a, b string) (int64, int64) {
	t.Helper()
	res, err := c.Do(ctxT(t), c.B().Eval().Script("return {redis.call('PEXPIRETIME', KEYS[1]), redis.call('PEXPIRETIME', KEYS[2])}").Numkeys(2).Key(a, b).Build()).AsIntSlice()
	if err != nil || len(res) != 2 {
		t.Fatalf("PEXPIRETIME %s and %s: %v, %v", a, b, res, err)
	}
	return res[0], res[1]
}
