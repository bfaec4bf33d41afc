package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// resource adapts the store's guard for the suite. Guarded writes go through
// the store under test; plain writes SET the very value key the guard
// protects (the negative control); reads go through a direct store.
type resource struct {
	s, direct *redisstore.Store
	c         rueidis.Client // direct client
}

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *resource) PlainWrite(ctx context.Context, name, v string) error {
	key, _ := r.direct.ValueKeys(name)
	return r.c.Do(ctx, r.c.B().Set().Key(key).Value(v).Build()).Error()
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	b, _, err := r.direct.FencedGet(ctx, name)
	return string(b), err
}

// TestConformance runs the lease suite on a single node, a fresh server per
// subtest: Store through a TCP proxy (the faults), Direct on a second
// client, Restart without persistence (all data lost) and a fresh client.
func TestConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Target {
		srv := testenv.Redis(t, nil)
		p := testenv.NewProxy(t, srv.Addr())
		s := checked(t, newProxiedClient(t, p.Addr()), nil)
		dc := srv.Client(t)
		direct := newRedis(t, dc, nil)
		return leasetest.Target{
			Store:  s.Leases(),
			Direct: direct.Leases(),
			Faults: p,
			Restart: func(t *testing.T) lease.Store {
				srv.Restart(t)
				return newRedis(t, srv.Client(t), nil).Leases()
			},
			Resource: &resource{s: s, direct: direct, c: dc},
		}
	})
}

// proxies is a TCP proxy per cluster node, acting together.
type proxies []*testenv.Proxy

func (ps proxies) Cut() {
	for _, p := range ps {
		p.Cut()
	}
}

func (ps proxies) DropReplies() {
	for _, p := range ps {
		p.DropReplies()
	}
}

func (ps proxies) Heal() {
	for _, p := range ps {
		p.Heal()
	}
}

// TestCluster runs on a three-master Redis Cluster of its own (it restarts
// every node, which a shared cluster must not see).
func TestCluster(t *testing.T) {
	cl := testenv.RedisCluster(t)

	t.Run("Conformance", func(t *testing.T) {
		leasetest.Run(t, func(t *testing.T) leasetest.Target {
			var ps proxies
			via := map[string]string{}
			for _, addr := range cl.Addrs() {
				p := testenv.NewProxy(t, addr)
				ps = append(ps, p)
				via[addr] = p.Addr()
			}
			s := checked(t, newClusterClient(t, cl.Addrs(), via), nil)
			dc := newClusterClient(t, cl.Addrs(), nil)
			direct := newRedis(t, dc, nil)
			return leasetest.Target{
				Store:  s.Leases(),
				Direct: direct.Leases(),
				Faults: ps,
				Restart: func(t *testing.T) lease.Store {
					restartCluster(t, cl)
					return newRedis(t, newClusterClient(t, cl.Addrs(), nil), nil).Leases()
				},
				Resource: &resource{s: s, direct: direct, c: dc},
			}
		})
	})

	t.Run("KeysOfOneLeaseShareASlot", func(t *testing.T) {
		testKeysShareSlot(t, newClusterClient(t, cl.Addrs(), nil))
	})
	t.Run("HolderSet", func(t *testing.T) {
		testHolderSetCluster(t, newClusterClient(t, cl.Addrs(), nil))
	})
	t.Run("Check", func(t *testing.T) {
		c := newClusterClient(t, cl.Addrs(), nil)
		s := newRedis(t, c, nil)
		if err := s.Check(ctxT(t)); err != nil {
			t.Fatalf("Check on the cluster: %v", err)
		}
		if p, err := s.ReleasePath(ctxT(t)); err != nil || p != wantReleasePath(t, c) {
			t.Fatalf("ReleasePath = %q, %v; want %q", p, err, wantReleasePath(t, c))
		}
	})
}

// restartCluster stops every node (data is lost: no persistence), starts
// them again and waits until the cluster serves every slot.
func restartCluster(t *testing.T, cl *testenv.RedisClusterServer) {
	t.Helper()
	for _, n := range cl.Nodes() {
		n.Stop(t)
	}
	for _, n := range cl.Nodes() {
		n.Start(t)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := clusterServes(t, cl)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not serving after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterServes reports whether every node says cluster_state:ok and a
// fresh client can write a key in each node's slots.
func clusterServes(t *testing.T, cl *testenv.RedisClusterServer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range cl.Addrs() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableRetry: true})
		if err != nil {
			return err
		}
		info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
		c.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return errorString("node " + addr + " not ok")
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableRetry: true})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, r := range [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}} {
		k := keyInSlots("probe", r[0], r[1])
		if err := c.Do(ctx, c.B().Set().Key(k).Value("1").Px(time.Second).Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// keyInSlots returns a key whose slot lies in [lo, hi].
func keyInSlots(prefix string, lo, hi int) string {
	for i := 0; ; i++ {
		k := prefix + ":" + strconv.Itoa(i)
		if s := testenv.KeySlot(k); s >= lo && s <= hi {
			return k
		}
	}
}
