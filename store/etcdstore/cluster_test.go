package etcdstore_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
)

// TestCluster stops a member of a 3-member cluster while a lease is held.
func TestCluster(t *testing.T) {
	t.Parallel()
	srv := testenv.EtcdCluster(t, 3)
	eps := srv.Endpoints()
	unit := minTTL(t, newClient(t, eps...))
	t.Logf("etcd grants %v exactly", unit)

	t.Run("LeaderStoppedWhileHeld", func(t *testing.T) {
		c := newClient(t, eps...)
		s := newEtcd(t, c, &etcdstore.Options{Prefix: uniquePrefix(t)}).Leases()
		k, a, b := "k", lease.NewToken(), lease.NewToken()
		ga := eventually(t, "acquire", func(ctx context.Context) (lease.Grant, error) {
			return s.Acquire(ctx, k, a, 5*unit)
		})
		leader := leaderIndex(t, c, eps)
		srv.StopMember(t, leader)
		t.Cleanup(func() { srv.StartMember(t, leader) })

		// The lock stays, with its fence, and its holder can renew it
		// through the remaining quorum.
		info := eventually(t, "inspect", func(ctx context.Context) (lease.Info, error) { return s.Inspect(ctx, k) })
		if !info.Held || info.Fence != ga.Fence {
			t.Fatalf("after stopping the leader: %+v, want held with fence %d", info, ga.Fence)
		}
		gr := eventually(t, "renew", func(ctx context.Context) (lease.Grant, error) { return s.Renew(ctx, k, a, 5*unit) })
		if gr.Fence != ga.Fence {
			t.Fatalf("renew fence %d, want %d", gr.Fence, ga.Fence)
		}
		// The holder stops renewing; the next holder gets a higher fence.
		waitFree(t, s, k, 30*unit+20*time.Second)
		gb := eventually(t, "takeover", func(ctx context.Context) (lease.Grant, error) {
			return s.Acquire(ctx, k, b, 5*unit)
		})
		if gb.Fence <= ga.Fence {
			t.Fatalf("fence %d after takeover, not above %d", gb.Fence, ga.Fence)
		}
		if info := eventually(t, "inspect", func(ctx context.Context) (lease.Info, error) { return s.Inspect(ctx, k) }); !info.Held || info.Fence != gb.Fence {
			t.Fatalf("after takeover: %+v, want held with fence %d", info, gb.Fence)
		}
	})
}

// leaderIndex returns the index in eps of the cluster's leader.
func leaderIndex(t *testing.T, c *clientv3.Client, eps []string) int {
	t.Helper()
	for i, ep := range eps {
		st, err := c.Status(ctxT(t), ep)
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no member is the leader")
	return -1
}
