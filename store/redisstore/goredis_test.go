package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore"
)

// The go-redis form of the store runs the same conformance suites as the
// rueidis form: every suite on a single node, and the lease and session
// suites on Redis Cluster.

// newGoClient connects a go-redis client as the store's documentation
// recommends (no retries, calls end with their context) and closes it when
// the test ends.
func newGoClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newGoClusterClient connects a go-redis cluster client whose every
// connection to a node goes through that node's proxy (via maps node
// address to proxy address); nil via connects directly.
func newGoClusterClient(t testing.TB, addrs []string, via map[string]string) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true}
	if via != nil {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			p, ok := via[addr]
			if !ok {
				return nil, fmt.Errorf("test: no proxy for node %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, p)
		}
	}
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkedGo returns a go-redis store on c whose server check passed, with
// a connection to every master open in c's pool. The check pipelines, and
// go-redis keeps pipelining connections in a pool of their own; a request
// must find a connection that was open before a fault starts, since a
// connection dialed while the proxy drops replies never finishes its
// handshake and the request would never be sent.
func checkedGo(t testing.TB, c redis.UniversalClient, o *redisstore.Options) *redisstore.Store {
	t.Helper()
	s := newGoRedis(t, c, o)
	if err := s.Check(ctxT(t)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		// A keyed command through the cluster client also loads its
		// command table (COMMAND), which it needs to route a command.
		err = cc.ForEachMaster(ctxT(t), func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
		if err == nil {
			err = cc.Exists(ctxT(t), "warm-up").Err()
		}
	} else {
		err = c.Ping(ctxT(t)).Err()
	}
	if err != nil {
		t.Fatalf("PING: %v", err)
	}
	return s
}

// clusterProxies puts a proxy in front of every node of cl.
func clusterProxies(t *testing.T, cl *testenv.RedisClusterServer) (proxies, map[string]string) {
	var ps proxies
	via := map[string]string{}
	for _, addr := range cl.Addrs() {
		p := testenv.NewProxy(t, addr)
		ps = append(ps, p)
		via[addr] = p.Addr()
	}
	return ps, via
}

// TestGoRedisCluster checks the go-redis form on the shared Redis Cluster.
func TestGoRedisCluster(t *testing.T) {
	t.Run("CheckAndHolderSet", func(t *testing.T) {
		cl := testenv.SharedRedisCluster(t)
		c := newGoClusterClient(t, cl.Addrs(), nil)
		s := newGoRedis(t, c, nil)
		if err := s.Check(ctxT(t)); err != nil {
			t.Fatalf("Check on the cluster: %v", err)
		}
		rc := newClusterClient(t, cl.Addrs(), nil)
		if p, err := s.ReleasePath(ctxT(t)); err != nil || p != wantReleasePath(t, rc) {
			t.Fatalf("ReleasePath = %q, %v; want %q", p, err, wantReleasePath(t, rc))
		}
		// A resource in another slot is refused before anything is sent.
		locker, err := lease.New(s.Leases(), nil)
		if err != nil {
			t.Fatal(err)
		}
		key := uniq(t, "k")
		l, err := locker.TryAcquire(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if err := s.HolderSet(ctxT(t), l, key, []byte("v")); err != nil {
			t.Fatalf("HolderSet in the lease's slot: %v", err)
		}
		if v, f, err := s.FencedGet(ctxT(t), key); err != nil || string(v) != "v" || f != l.Fence() {
			t.Fatalf("FencedGet = %q, %d, %v", v, f, err)
		}
	})
}
