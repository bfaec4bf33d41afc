package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/redisstore"
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
	t.Run("ConfirmedWriteFollowsMoved", func(t *testing.T) {
		testConfirmedMoved(t, cl)
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

// A confirmed write is routed by the store itself; when the slot moved
// since the store last looked (CLUSTER SETSLOT … NODE on an empty slot),
// the old owner answers MOVED and the store follows it: the write lands on
// the new owner, and its confirmation is judged there (here it has no
// replica and one is required, so the write is reported unconfirmed).
func testConfirmedMoved(t *testing.T, cl *testenv.RedisClusterServer) {
	ctx := ctxT(t)
	direct := make([]rueidis.Client, 3)
	ids := make([]string, 3)
	for i, addr := range cl.Addrs() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableRetry: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		direct[i] = c
		if ids[i], err = c.Do(ctx, c.B().ClusterMyid().Build()).ToString(); err != nil {
			t.Fatal(err)
		}
	}
	// A resource in the first master's slots, whose slot holds no key.
	var res string
	var sl int
	for i := 0; ; i++ {
		res = uniq(t, "moved-"+strconv.Itoa(i))
		sl = testenv.KeySlot("{" + res + "}")
		if sl > 5460 {
			continue
		}
		n, err := direct[0].Do(ctx, direct[0].B().ClusterCountkeysinslot().Slot(int64(sl)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	c := newClusterClient(t, cl.Addrs(), nil)
	s := newRedis(t, c, &redisstore.Options{Prefix: uniq(t, "p") + ":", Replication: redisstore.Replication{Replicas: 1, Timeout: 10 * time.Millisecond}})
	if _, err := s.Replicas(ctx); err != nil { // the view: the slot is the first master's
		t.Fatal(err)
	}
	for _, i := range []int{1, 0, 2} {
		if err := direct[i].Do(ctx, direct[i].B().ClusterSetslot().Slot(int64(sl)).Node().NodeId(ids[1]).Build()).Error(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE on node %d: %v", sl, i, err)
		}
	}
	t.Cleanup(func() {
		for _, i := range []int{0, 1, 2} {
			direct[i].Do(context.Background(), direct[i].B().ClusterSetslot().Slot(int64(sl)).Node().NodeId(ids[0]).Build())
		}
	})
	err := s.FencedSet(ctx, res, 1, []byte("v"))
	if !errors.Is(err, redisstore.ErrUnconfirmed) {
		t.Fatalf("FencedSet on a moved slot = %v, want ErrUnconfirmed (the write followed MOVED and no replica confirmed it)", err)
	}
	vk, _ := s.ValueKeys(res)
	if v, err := direct[1].Do(ctx, direct[1].B().Get().Key(vk).Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("the value on the slot's new owner = %q, %v; want v", v, err)
	}
}
