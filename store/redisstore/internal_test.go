package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// forms are the two ways to make a Store on one server address: through a
// rueidis client and through a go-redis client (both without retries).
var forms = []struct {
	name string
	open func(t *testing.T, addr string, o *Options) *Store
}{
	{"rueidis", func(t *testing.T, addr string, o *Options) *Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := New(c, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"goredis", func(t *testing.T, addr string, o *Options) *Store {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		s, err := NewGoRedis(c, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// eachForm runs fn once per client form.
func eachForm(t *testing.T, fn func(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store)) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) { fn(t, f.open) })
	}
}

// The scripts repeat lease's limits; they must agree.
func TestScriptLimitsMatchLease(t *testing.T) {
	if lease.MaxTokenLen != 128 {
		t.Errorf("lease.MaxTokenLen = %d; the scripts check 128", lease.MaxTokenLen)
	}
	if lease.MaxTTL != 24*time.Hour || lease.MinTTL != time.Millisecond {
		t.Errorf("lease TTL range [%v, %v]; the scripts check [1ms, 24h]", lease.MinTTL, lease.MaxTTL)
	}
	for name, src := range map[string]string{"acquire": acquireSrc, "renew": renewSrc} {
		if !strings.Contains(src, "#token > 128") || !strings.Contains(src, "ttl > 86400000") {
			t.Errorf("%s.lua does not check the token and TTL limits", name)
		}
	}
	if lease.MaxHolderLen != 128 || !strings.Contains(acquireSrc, "#holder > 128") {
		t.Errorf("lease.MaxHolderLen = %d; acquire.lua must check the same limit", lease.MaxHolderLen)
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		tag := escape(string(b))
		if got, want := int(slot(tag)), testenv.KeySlot("x{"+tag+"}y"); got != want {
			t.Fatalf("slot(%q) = %d, Redis says %d", tag, got, want)
		}
	}
}

func TestEscapeIsInjective(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"}", "%7D", "%257D", "{", "%7B", "%", "%25", "a}b", "a%7Db", "plain", "{}", "%7B%7D"} {
		e := escape(s)
		if strings.ContainsAny(e, "{}") {
			t.Fatalf("escape(%q) = %q keeps a brace", s, e)
		}
		if prev, ok := seen[e]; ok {
			t.Fatalf("escape(%q) = escape(%q) = %q", s, prev, e)
		}
		seen[e] = s
	}
}

// The scripts validate their arguments before their first write, so a call
// that bypasses the Go checks still writes nothing.
func TestScriptsValidateBeforeWriting(t *testing.T) {
	eachForm(t, testScriptsValidateBeforeWriting)
}

func testScriptsValidateBeforeWriting(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
	ctx := context.Background()
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	s := open(t, srv.Addr(), nil)
	lock, fk, hk := s.leaseKeys3("k")
	qk, sk, ho, _ := s.queueKeys("k")
	fl := s.floorKey("k")
	vk, ak := s.valueKeys("r")
	cases := []struct {
		name string
		lua  *rclient.Script
		keys []string
		args []string
	}{
		{"acquire empty token", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"", "1000", "1000", "", "0", "0", ""}},
		{"acquire long token", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{strings.Repeat("t", 129), "1000", "1000", "", "0", "0", ""}},
		{"acquire zero ttl", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "0", "1000", "", "0", "0", ""}},
		{"acquire fractional ttl", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1.5", "1000", "", "0", "0", ""}},
		{"acquire ttl over a day", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "86400001", "1000", "", "0", "0", ""}},
		{"acquire ttl not a number", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "x", "1000", "", "0", "0", ""}},
		{"acquire bad retention", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "-1", "", "0", "0", ""}},
		{"acquire long holder", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", strings.Repeat("h", 129), "0", "0", ""}},
		{"acquire holder with a line break", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "a\nb", "0", "0", ""}},
		{"acquire holder with NUL", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "a\x00b", "0", "0", ""}},
		{"acquire without stay argument", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", ""}},
		{"acquire three keys", acquireScript, []string{lock, fk, hk}, []string{"t", "1000", "1000", "", "0", "0", ""}},
		{"acquire without the floor", acquireScript, []string{lock, fk, hk, qk, sk}, []string{"t", "1000", "1000", "", "0", "0", ""}},
		{"acquire negative stay", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "", "-1", "0", ""}},
		{"acquire attempt not a number", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "", "10", "x", "c"}},
		{"acquire channel with a space", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "", "10", "1", "a b"}},
		{"acquire fractional stay", acquireScript, []string{lock, fk, hk, qk, sk, fl, ho}, []string{"t", "1000", "1000", "", "0.5", "0", ""}},
		{"renew zero ttl", renewScript, []string{lock, fk, hk}, []string{"t", "0", "1000"}},
		{"renew two keys", renewScript, []string{lock, fk}, []string{"t", "1000", "1000"}},
		{"renew bad retention", renewScript, []string{lock, fk, hk}, []string{"t", "1000", "-1"}},
		{"release empty token", releaseScript, []string{lock, qk, sk, hk, fk, fl, ho}, []string{"", "", "0", "0", "0"}},
		{"release without channel", releaseScript, []string{lock, qk, sk, hk, fk, fl, ho}, []string{"t"}},
		{"release three keys", releaseScript, []string{lock, qk, sk}, []string{"t", "", "0", "0", "0"}},
		{"release bad retention", releaseScript, []string{lock, qk, sk, hk, fk, fl, ho}, []string{"t", "w", "0", "1", "-1"}},
		{"release fractional retention", releaseScript, []string{lock, qk, sk, hk, fk, fl, ho}, []string{"t", "w", "0", "1", "1.5"}},
		{"release bad hand-over flag", releaseScript, []string{lock, qk, sk, hk, fk, fl, ho}, []string{"t", "w", "0", "yes", "0"}},
		{"release one key", releaseScript, []string{lock}, []string{"t", "", "0", "0", "0"}},
		{"leave empty token", leaveScript, []string{qk, sk, ho}, []string{"", "w", "0"}},
		{"leave one key", leaveScript, []string{qk}, []string{"t", "w", "0"}},
		{"fenced set negative", fencedSetScript, []string{vk, ak}, []string{"-1", "s", "v"}},
		{"fenced set leading zero", fencedSetScript, []string{vk, ak}, []string{"01", "s", "v"}},
		{"fenced set too long", fencedSetScript, []string{vk, ak}, []string{"123456789012345678901", "s", "v"}},
		{"fenced set bad mode", fencedSetScript, []string{vk, ak}, []string{"1", "x", "v"}},
		{"holder set empty token", fencedSetScript, []string{vk, ak, lock, fk}, []string{"1", "h", "v", ""}},
		{"holder set two keys", fencedSetScript, []string{vk, ak}, []string{"1", "h", "v", "t"}},
		{"fenced set four keys", fencedSetScript, []string{vk, ak, lock, fk}, []string{"1", "s", "v"}},
	}
	for _, tc := range cases {
		err := tc.lua.Exec(ctx, s.c, tc.keys, tc.args).Error()
		if _, ok := rclient.ServerError(err); !ok || !strings.Contains(err.Error(), "redisstore: invalid") {
			t.Errorf("%s: %v, want the script's refusal", tc.name, err)
		}
		if !errors.Is(s.fail(err), lease.ErrInvalid) {
			t.Errorf("%s: classified as %v, want ErrInvalid", tc.name, s.fail(err))
		}
	}
	n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	if err != nil || n != 0 {
		t.Fatalf("refused scripts wrote %d keys (%v)", n, err)
	}
	// A malformed stored fence (written by hand) counts as lost: the grant
	// takes the clock floor and repairs the key.
	if err := c.Do(ctx, c.B().Set().Key(fk).Value("garbage").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	before := uint64(time.Now().Add(-time.Minute).UnixMicro())
	g, err := s.Leases().Acquire(ctx, "k", "t", time.Second)
	if err != nil || g.Fence < before {
		t.Fatalf("acquire over a malformed fence: %+v, %v; want the clock floor", g, err)
	}
	if v, err := c.Do(ctx, c.B().Get().Key(fk).Build()).ToString(); err != nil || v != strconv.FormatUint(g.Fence, 10) {
		t.Fatalf("fence key %q (%v), want %d", v, err, g.Fence)
	}
}

// A node without DELEX (as after a downgrade in a mixed cluster) makes the
// release fall back to the script, without deleting anything by mistake.
func TestDelexFallback(t *testing.T) { eachForm(t, testDelexFallback) }

func testDelexFallback(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
	ctx := context.Background()
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	s := open(t, srv.Addr(), nil)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if s.delex.Load() {
		t.Skip("the server has DELEX")
	}
	tok := lease.NewToken()
	if _, err := s.Leases().Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.delex.Store(true) // as if the check had seen DELEX
	if p, _ := s.ReleasePath(ctx); p != ReleaseDelex {
		t.Fatalf("path %q", p)
	}
	err := s.Leases().Release(ctx, "k", lease.NewToken())
	if !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("wrong-token release through the fallback: %v", err)
	}
	if p, _ := s.ReleasePath(ctx); p != ReleaseLua {
		t.Fatalf("path after the fallback = %q, want lua", p)
	}
	lock, _ := s.leaseKeys("k")
	if v, err := c.Do(ctx, c.B().Get().Key(lock).Build()).ToString(); err != nil || v != tok {
		t.Fatalf("the owner's lock was touched (%v)", err)
	}
	s.delex.Store(true)
	if err := s.Leases().Release(ctx, "k", tok); err != nil {
		t.Fatalf("owner's release through the fallback: %v", err)
	}
	if err := c.Do(ctx, c.B().Get().Key(lock).Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("lock still stored (%v)", err)
	}
}

// The lazy check runs once: later writes cost no extra round trip, and a
// connection failure (not a caller's deadline) makes the next write check
// again.
func TestCheckIsCached(t *testing.T) { eachForm(t, testCheckIsCached) }

func testCheckIsCached(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
	ctx := context.Background()
	srv := testenv.Redis(t, nil)
	p := testenv.NewProxy(t, srv.Addr())
	s := open(t, p.Addr(), nil)
	if s.checked.Load() {
		t.Fatal("checked before any write")
	}
	if _, err := s.Leases().Acquire(ctx, "k", "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if !s.checked.Load() {
		t.Fatal("the first write did not run the check")
	}
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	<-short.Done()
	_, err := s.Leases().Acquire(short, "k2", "t", time.Minute)
	cancel()
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("acquire with an expired context: %v", err)
	}
	if !s.checked.Load() {
		t.Fatal("a caller's deadline dropped the check")
	}
	p.Cut()
	if _, err := s.Leases().Acquire(ctx, "k3", "t", time.Minute); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("acquire through a cut proxy: %v", err)
	}
	if s.checked.Load() {
		t.Fatal("a connection failure kept the check")
	}
	p.Heal()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := s.Leases().Acquire(ctx, "k3", "t", time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Heal: %v", err)
		}
	}
	if !s.checked.Load() {
		t.Fatal("the check did not run again")
	}
}

// The retention sent to the scripts stays within what they accept.
func TestFenceRetentionBounds(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, time.Hour, MaxFenceRetention} {
		s, err := New(stubClient{}, &Options{FenceRetention: d})
		if err != nil {
			t.Fatalf("FenceRetention %v: %v", d, err)
		}
		ms, err := strconv.ParseInt(s.keep, 10, 64)
		if err != nil || ms < 1 || ms > 315360000000 {
			t.Errorf("FenceRetention %v sends %q", d, s.keep)
		}
	}
	for _, o := range []*Options{nil, {}} {
		s, err := New(stubClient{}, o)
		if err != nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		if s.keep != "0" {
			t.Errorf("default retention sends %q, want 0", s.keep)
		}
	}
}

// stubClient is enough of a rueidis.Client for New.
type stubClient struct{ rueidis.Client }

func (stubClient) Mode() rueidis.ClientMode { return rueidis.ClientModeStandalone }

// The server check loads every script of every view, on either client, so
// that a view's first call after a restart is one EVALSHA (and a first call
// whose reply is lost still applied: an unanswered NOSCRIPT would have
// left the request unsent).
func TestCheckLoadsEveryScript(t *testing.T) { eachForm(t, testCheckLoadsEveryScript) }

func testCheckLoadsEveryScript(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
	ctx := context.Background()
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	if err := open(t, srv.Addr(), nil).Check(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir("lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("lua/: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("lua", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(b)
		ok, err := c.Do(ctx, c.B().ScriptExists().Sha1(hex.EncodeToString(sum[:])).Build()).AsIntSlice()
		if err != nil || len(ok) != 1 || ok[0] != 1 {
			t.Errorf("%s not loaded by Check: %v, %v", f.Name(), ok, err)
		}
	}
}

// newClient connects a rueidis client with retries disabled and closes it
// when the test ends.
func newClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Every slot's fence floor tag hashes to that slot and is the smallest
// number that does, and the table-driven CRC16 is the cluster's HASH_SLOT.
func TestFloorTags(t *testing.T) {
	tags := floorTags()
	first := map[int]uint32{}
	for n := uint32(0); len(first) < slots; n++ {
		sl := testenv.KeySlot(strconv.FormatUint(uint64(n), 10))
		if _, ok := first[sl]; !ok {
			first[sl] = n
		}
	}
	for sl := range slots {
		if tags[sl] != first[sl] {
			t.Fatalf("slot %d: floor tag %d, want %d", sl, tags[sl], first[sl])
		}
	}
	for _, k := range []string{"", "a", "123456789", "report:tenant-42", "%7Da%7Bb%25", "ünïcode", strings.Repeat("k", 300)} {
		if got, want := int(slot(k)), testenv.KeySlot("{"+k+"}"); k != "" && got != want {
			t.Fatalf("slot(%q) = %d, want %d", k, got, want)
		}
		if slot(k) != slotOf([]byte(k)) {
			t.Fatalf("slot and slotOf differ on %q", k)
		}
	}
	if slot("123456789") != 0x31C3&(slots-1) {
		t.Fatalf("slot(123456789) = %#x: not CRC16/XMODEM", slot("123456789"))
	}
	s, err := New(stubClient{}, &Options{Prefix: "p{x}:"})
	if err != nil {
		t.Fatal(err)
	}
	if k := s.floorKey("report:tenant-42"); testenv.KeySlot(k) != testenv.KeySlot("{report:tenant-42}") || !strings.HasPrefix(k, "p%7Bx%7D:{") || !strings.HasSuffix(k, "}:floor") {
		t.Fatalf("floor key %q: not in the key's slot, or not <prefix>{<n>}:floor", k)
	}
}

// allKeys builds the same keys as the functions that build each kind.
func TestAllKeys(t *testing.T) {
	for _, prefix := range []string{"", "p{x}%:", strings.Repeat("p", 80)} {
		s, err := New(stubClient{}, &Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"k", "}a{b%", "report:tenant-42", strings.Repeat("k", lease.MaxKeyLen)} {
			k := s.allKeys(key)
			lock, fence, holder := s.leaseKeys3(key)
			queue, stays, handover, wake := s.queueKeys(key)
			want := leaseKeySet{lock, fence, holder, queue, stays, handover, wake, s.floorKey(escape(key))}
			if k != want {
				t.Fatalf("allKeys(%q) = %+v, want %+v", key, k, want)
			}
		}
	}
}
