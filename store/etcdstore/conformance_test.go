package etcdstore_test

import (
	"testing"

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
