package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
)

// TestCluster runs on a three-master Redis Cluster of its own.
func TestCluster(t *testing.T) {
	cl := testenv.RedisCluster(t)

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
