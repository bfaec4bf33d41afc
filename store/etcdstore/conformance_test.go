package etcdstore_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/storetest"
)

// newStore is the one place the conformance tests build a store on a
// client.
func newStore(c *clientv3.Client) *etcdstore.Store { return must(etcdstore.New(c, nil)) }

// TestConformance runs the lease suite (the store's one primitive) on a
// single member and on a 3-member cluster, with the store's client behind
// a TCP proxy (pinned to member 0 on the cluster).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, members := range []int{1, 3} {
		name := "Single"
		if members > 1 {
			name = "Cluster"
		}
		t.Run(name, func(t *testing.T) {
			var srv *testenv.EtcdServer
			if members == 1 {
				srv = testenv.Etcd(t)
			} else {
				srv = testenv.EtcdCluster(t, members)
			}
			eps := srv.Endpoints()
			unit := minTTL(t, newClient(t, eps...))
			t.Logf("etcd grants %v exactly", unit)
			storetest.Run(t, storetest.Factory{
				Lease: func(t *testing.T) leasetest.Target {
					p := testenv.NewProxy(t, hostPort(eps[0]))
					c, d := connected(t, "http://"+p.Addr()), newClient(t, eps...)
					ds := newStore(d)
					return leasetest.Target{
						Store:  newStore(c).Leases(),
						Direct: ds.Leases(),
						Faults: p,
						Restart: func(t *testing.T) lease.Store {
							srv.Restart(t)
							return newStore(newClient(t, eps...)).Leases()
						},
						// Lost data: every key of the store deleted (etcd's
						// revision, which the fences are, still grows).
						Forget: func(t *testing.T) lease.Store {
							if _, err := d.Delete(ctxT(t), etcdstore.DefaultPrefix, clientv3.WithPrefix()); err != nil {
								t.Fatalf("delete the store's keys: %v", err)
							}
							return ds.Leases()
						},
						Resource: &resource{s: ds, c: d, prefix: etcdstore.DefaultPrefix},
						Unit:     unit,
						Ended:    ended(d, etcdstore.DefaultPrefix),
					}
				},
			})
		})
	}
}

// connected returns a client whose connection is up: a proxy that drops
// replies from the start would otherwise leave it waiting for the server's
// HTTP/2 preface, and no request would ever reach the server.
func connected(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	c := newClient(t, ep)
	if _, err := c.Get(ctxT(t), "warm-up"); err != nil {
		t.Fatalf("warm-up read through %s: %v", ep, err)
	}
	return c
}

// ended reaches the keys of the store under sp on c: Reclaim waits until
// etcd has revoked every expired lease the store's keys were on (etcd does
// that on its own; nothing in tenure sweeps), Keys reads the lock, holder
// and waiter spaces. Fences are revisions, so there is nothing to Raise.
func ended(c *clientv3.Client, sp string) *leasetest.Ended {
	return &leasetest.Ended{
		Reclaim: func(t *testing.T) {
			ctx := ctxT(t)
			for deadline := time.Now().Add(30 * time.Second); ; {
				resp, err := c.Get(ctx, sp, clientv3.WithPrefix(), clientv3.WithKeysOnly())
				if err != nil {
					t.Fatalf("read the store's keys: %v", err)
				}
				waiting := 0
				seen := map[clientv3.LeaseID]bool{}
				for _, kv := range resp.Kvs {
					id := clientv3.LeaseID(kv.Lease)
					if id == 0 || seen[id] {
						continue
					}
					seen[id] = true
					if ttl, err := c.TimeToLive(ctx, id); err != nil || ttl.TTL <= 0 {
						waiting++ // expired, not yet revoked
					}
				}
				if waiting == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("etcd has not revoked %d expired leases after 30s", waiting)
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
		Keys: func(t *testing.T, prefix string) []string {
			var keys []string
			for _, space := range []string{"lock/", "holder/", "waiter/"} {
				resp, err := c.Get(ctxT(t), sp+space+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
				if err != nil {
					t.Fatalf("read the store's keys: %v", err)
				}
				for _, kv := range resp.Kvs {
					k, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), sp+space), "\x00")
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			return slices.Compact(keys)
		},
	}
}
