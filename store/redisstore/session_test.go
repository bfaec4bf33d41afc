package redisstore_test

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// dumpKeys returns every key under prefix with its value (hashes, sorted
// sets) on a single server.
func dumpKeys(t *testing.T, c rueidis.Client, prefix string) string {
	ctx := ctxT(t)
	keys, err := c.Do(ctx, c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\n")
		typ, _ := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		switch typ {
		case "hash":
			m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
			for f, v := range m {
				b.WriteString("  " + f + "=" + v + "\n")
			}
		case "zset":
			ms, _ := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
			b.WriteString("  " + strings.Join(ms, " ") + "\n")
		}
	}
	return b.String()
}

func sessionHooks(tg *sessiontest.Target, direct *redisstore.Store, dc rueidis.Client) {
	tg.LagCleanup = func(t *testing.T, id session.ID) {
		if err := dc.Do(ctxT(t), dc.B().Persist().Key(direct.SessionKey(id)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	tg.Present = func(t *testing.T, id session.ID) bool {
		n, err := dc.Do(ctxT(t), dc.B().Exists().Key(direct.SessionKey(id)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
}

// TestSessionConformance runs the session suite on the shared server, the
// Store behind a TCP proxy, keys under a prefix of each case's own.
func TestSessionConformance(t *testing.T) {
	srv := testenv.SharedRedis(t)
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		prefix := "sessiontest:" + rand.Text()[:8] + ":"
		p := testenv.NewProxy(t, srv.Addr())
		s := checked(t, newProxiedClient(t, p.Addr()), &redisstore.Options{Prefix: prefix})
		dc := newClient(t, srv.Addr())
		direct := redisstore.New(dc, &redisstore.Options{Prefix: prefix})
		tg := sessiontest.Target{Store: s.Sessions(), Direct: direct.Sessions(), Faults: p}
		sessionHooks(&tg, direct, dc)
		tg.Dump = func(t *testing.T) string { return dumpKeys(t, dc, prefix) }
		return tg
	})
}

// TestSessionCluster runs the suite on the shared Redis Cluster: a user's
// sessions and index share a hash tag, so every script runs on one node.
func TestSessionCluster(t *testing.T) {
	cl := testenv.SharedRedisCluster(t)
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		prefix := "sessiontest:" + rand.Text()[:8] + ":"
		var ps proxies
		via := map[string]string{}
		for _, addr := range cl.Addrs() {
			p := testenv.NewProxy(t, addr)
			ps = append(ps, p)
			via[addr] = p.Addr()
		}
		s := checked(t, newClusterClient(t, cl.Addrs(), via), &redisstore.Options{Prefix: prefix})
		dc := newClusterClient(t, cl.Addrs(), nil)
		direct := redisstore.New(dc, &redisstore.Options{Prefix: prefix})
		tg := sessiontest.Target{Store: s.Sessions(), Direct: direct.Sessions(), Faults: ps}
		sessionHooks(&tg, direct, dc)
		return tg
	})
}

// A user's session keys and index share one slot.
func TestSessionKeysShareSlot(t *testing.T) {
	s := redisstore.New(newClient(t, testenv.SharedRedis(t).Addr()), &redisstore.Options{Prefix: "p{x}:"})
	m, err := session.New(s.Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob{1}", "c:d"} {
		tok, _, err := m.Create(ctxT(t), u, nil)
		if err != nil {
			t.Fatal(err)
		}
		sk, ik := s.SessionKey(tok.ID()), s.SessionIndexKey(u)
		if testenv.KeySlot(sk) != testenv.KeySlot(ik) {
			t.Fatalf("user %q: session key %s (slot %d) and index %s (slot %d) differ", u, sk, testenv.KeySlot(sk), ik, testenv.KeySlot(ik))
		}
	}
}
