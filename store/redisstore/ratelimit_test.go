package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// scanKeys lists every key under prefix on every node the client knows,
// with its PTTL (-1: no expiry).
func scanKeys(ctx context.Context, c rueidis.Client, prefix string) ([]ratelimittest.KeyTTL, error) {
	var out []ratelimittest.KeyTTL
	for _, n := range c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, err
			}
			for _, k := range e.Elements {
				ms, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil {
					return nil, err
				}
				if ms == -2 {
					continue // expired meanwhile
				}
				out = append(out, ratelimittest.KeyTTL{Key: k, TTL: time.Duration(ms) * time.Millisecond})
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out, nil
}

// rateTarget is a target on a store with a prefix of its own, reached
// through faults, and inspected through a direct client.
func rateTarget(s *redisstore.Store, direct rueidis.Client, prefix string, faults ratelimittest.Faults) ratelimittest.Target {
	return ratelimittest.Target{
		Store:  s.Limits(),
		Faults: faults,
		Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
			return scanKeys(ctx, direct, prefix)
		},
		// Every key carries its TTL: Redis expires the state natively,
		// and SCAN lists no expired key.
		Retained: &ratelimittest.Retained{
			Reclaim: func(*testing.T) {},
			Stored: func(t *testing.T) []string {
				ks, err := scanKeys(ctxT(t), direct, prefix)
				if err != nil {
					t.Fatalf("scan the limits' keys: %v", err)
				}
				// A permit key's state is two keys, its set and its fence
				// hash (the set's name + ":f"): listed as one entry.
				var out []string
				for _, k := range ks {
					out = append(out, strings.TrimSuffix(k.Key, ":f"))
				}
				slices.Sort(out)
				return slices.Compact(out)
			},
		},
		Poison: func(ctx context.Context, key driver.StateKey) error {
			ks, err := redisstore.New(direct, &redisstore.Options{Prefix: prefix})
			if err != nil {
				return err
			}
			k := ks.RateKey(key)
			return direct.Do(ctx, direct.B().Set().Key(k).Value("not a state").Px(time.Minute).Build()).Error()
		},
	}
}

var rlSeq int

// TestRateLimitKeysShareASlot: the keys of a group decision share the
// group's hash slot, whatever the caller's keys; a single limiter's keys
// spread over the cluster by limit and key.
func TestRateLimitKeysShareASlot(t *testing.T) {
	s := newRedis(t, newClient(t, testenv.SharedRedis(t).Addr()), nil)
	slots := map[int]bool{}
	for _, k := range []driver.StateKey{
		{Group: "api", Kind: "g", Name: "user", Key: "alice"},
		{Group: "api", Kind: "f", Name: "global", Key: "all"},
		{Group: "api", Kind: "l", Name: "user", Key: "{bob}"},
	} {
		slots[testenv.KeySlot(s.RateKey(k))] = true
	}
	if len(slots) != 1 {
		t.Fatalf("a group's keys fall in %d slots", len(slots))
	}
	spread := map[int]bool{}
	for i := range 20 {
		spread[testenv.KeySlot(s.RateKey(driver.StateKey{Kind: "g", Name: "n", Key: fmt.Sprintf("user:%d", i)}))] = true
	}
	if len(spread) < 10 {
		t.Fatalf("20 keys of one limiter fall in only %d slots", len(spread))
	}
	// Braces in keys and prefixes never end the tag early.
	k := newRedis(t, newClient(t, testenv.SharedRedis(t).Addr()), &redisstore.Options{Prefix: "{x}"}).RateKey(driver.StateKey{Kind: "g", Name: "n", Key: "{a}"})
	if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
		t.Fatalf("key %q has more than one hash tag", k)
	}
}

// TestRateLimitOneRoundTrip: a decision is one EVALSHA (a single or a
// group decision alike); after SCRIPT FLUSH the script is sent again with
// EVAL and keeps working.
func TestRateLimitOneRoundTrip(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, nil)
	c := newClient(t, srv.Addr())
	s := checked(t, c, nil)
	user, _ := ratelimit.New(s.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "user", Rate: 100, Period: time.Second}, nil)
	global, _ := ratelimit.New(s.Limits(), ratelimit.SlidingLog, ratelimit.Limit{Name: "global", Rate: 1000, Period: time.Second}, nil)
	g, _ := ratelimit.NewGroup("api", user, global)
	if _, err := user.Allow(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := user.Allow(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := g.AllowN(ctx, []string{fmt.Sprint("k", i), "all"}, 1); err != nil {
			t.Fatal(err)
		}
	}
	// commandstats also counts the commands the scripts run: those are
	// the ones a script may call, and TIME once per decision.
	stats := commandStats(t, c)
	inScript := map[string]bool{"time": true, "get": true, "set": true, "zcount": true, "zrange": true,
		"zrangebyscore": true, "zremrangebyscore": true, "zadd": true, "pexpireat": true, "pexpiretime": true, "incrby": true}
	for name, n := range stats {
		if name == "hello" || strings.HasPrefix(name, "client") {
			continue // a connection the client opened meanwhile
		}
		if name != "evalsha" && !inScript[name] {
			t.Errorf("the decisions sent %d %s", n, name)
		}
	}
	if stats["evalsha"] != 20 || stats["time"] != 20 {
		t.Fatalf("20 decisions sent %v, want 20 EVALSHA, each reading TIME once", stats)
	}
	if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if d, err := user.Allow(ctx, "after-flush"); err != nil || !d.Allowed {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
	}
}

// commandStats returns calls per command since the last CONFIG RESETSTAT,
// leaving out the commands the test itself sends (INFO, CONFIG).
func commandStats(t *testing.T, c rueidis.Client) map[string]int {
	info, err := c.Do(ctxT(t), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var calls int
		fmt.Sscanf(rest, "calls=%d", &calls)
		out[name] = calls
	}
	return out
}

// TestRateLimitMalformedState: a value the scripts did not write is
// reported (not silently replaced), and nothing is written.
func TestRateLimitMalformedState(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, testenv.SharedRedis(t).Addr())
	prefix := fmt.Sprintf("rlbad:%d:", time.Now().UnixNano())
	s := checked(t, c, &redisstore.Options{Prefix: prefix})
	for _, alg := range ratelimittest.Algorithms {
		l, _ := ratelimit.New(s.Limits(), alg, ratelimit.Limit{Name: "bad", Rate: 3, Period: time.Minute}, nil)
		k := s.RateKey(driver.StateKey{Name: "bad", Key: "k", Kind: map[ratelimit.Algorithm]string{0: "g", 1: "f", 2: "l", 3: "w"}[alg]})
		if err := c.Do(ctx, c.B().Set().Key(k).Value("12:x").Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		_, err := l.Allow(ctx, "k")
		if err == nil || errors.Is(err, ratelimit.ErrUnavailable) || errors.Is(err, ratelimit.ErrInvalid) {
			t.Fatalf("%v over a malformed value: %v", alg, err)
		}
		if v, ok := get(t, c, k); !ok || v != "12:x" {
			t.Fatalf("%v: the malformed value was changed to %q", alg, v)
		}
	}
}

// TestRateLimitEvictingServerRefused: like leases, rate limits refuse a
// server that may evict keys (an evicted counter lets a burst through).
func TestRateLimitEvictingServerRefused(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.Redis(t, &testenv.RedisOptions{MaxMemoryPolicy: "allkeys-lru"})
	c := newClient(t, srv.Addr())
	s := newRedis(t, c, nil)
	l, _ := ratelimit.New(s.Limits(), ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Second}, nil)
	if _, err := l.Allow(ctx, "k"); !errors.Is(err, redisstore.ErrEvictionPolicy) {
		t.Fatalf("Allow on an evicting server: %v, want ErrEvictionPolicy", err)
	}
	if n := dbsize(t, c); n != 0 {
		t.Fatalf("%d keys written", n)
	}
}
