package testenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// clusterSlots are the slot ranges of the three masters of a
// [RedisClusterServer], the same split redis-cli --cluster create makes.
var clusterSlots = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// RedisClusterServer is a Redis Cluster of three masters without replicas,
// owning slots 0-5460, 5461-10922 and 10923-16383 in that order.
type RedisClusterServer struct {
	nodes []*RedisServer
}

// RedisCluster starts a fresh three-master Redis Cluster and stops it when
// the test ends. It returns once every node reports cluster_state:ok and a
// cluster client has written and read a key on every node.
func RedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server")
	c, err := newRedisCluster(bin)
	return forTest(t, "redis cluster node", c, err)
}

// sharedRedisCluster is started by the first call of SharedRedisCluster.
var sharedRedisCluster shared[*RedisClusterServer]

// SharedRedisCluster returns the Redis Cluster shared by all tests of the
// process, starting it on first use. Tests must use keys of their own and
// must not stop or flush it. [Main] stops it.
func SharedRedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server")
	return sharedRedisCluster.get(t, "shared redis cluster node", func() (*RedisClusterServer, error) { return newRedisCluster(bin) })
}

// newRedisCluster starts three cluster-enabled nodes, assigns the slots,
// joins the nodes and waits until the cluster serves requests. On failure
// the returned cluster (never nil) holds whatever nodes were started.
func newRedisCluster(bin string) (*RedisClusterServer, error) {
	c := &RedisClusterServer{}
	for range clusterSlots {
		n, err := newRedis(bin, nil, true)
		c.nodes = append(c.nodes, n)
		if err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i, n := range c.nodes {
		addr := n.Addr()
		// Distinct config epochs up front spare the nodes the collision
		// resolution they would otherwise go through (redis-cli does the
		// same).
		if _, err := respCall(ctx, addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return c, fmt.Errorf("testenv: redis cluster node %s: CLUSTER SET-CONFIG-EPOCH: %w", addr, err)
		}
		r := clusterSlots[i]
		if _, err := respCall(ctx, addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			return c, fmt.Errorf("testenv: redis cluster node %s: CLUSTER ADDSLOTSRANGE: %w", addr, err)
		}
	}
	first := c.nodes[0].Addr()
	for _, n := range c.nodes[1:] {
		n.mu.Lock()
		port, bus := n.port, n.busPort
		n.mu.Unlock()
		if _, err := respCall(ctx, first, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(port), strconv.Itoa(bus)); err != nil {
			return c, fmt.Errorf("testenv: redis cluster node %s: CLUSTER MEET %d: %w", first, port, err)
		}
	}
	procs := c.procs()
	err := waitUntil("redis cluster", startTimeout, procs, func(ctx context.Context) error {
		for _, n := range c.nodes {
			info, err := respCall(ctx, n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return fmt.Errorf("node %s: CLUSTER INFO: %s", n.Addr(), strings.Join(strings.Fields(info), " "))
			}
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	// cluster_state:ok on every node still leaves a window in which a
	// client's view of the slots can be stale; make sure a real client can
	// reach every node before handing the cluster out.
	keys := make([]string, len(clusterSlots))
	for i, r := range clusterSlots {
		keys[i] = keyInSlots("testenv:probe", r[0], r[1])
	}
	return c, waitUntil("redis cluster slots served", startTimeout, procs, func(ctx context.Context) error {
		for i, k := range keys {
			addr := c.nodes[i].Addr()
			if _, err := respCall(ctx, addr, "SET", k, "1"); err != nil {
				return fmt.Errorf("SET %s on %s: %w", k, addr, err)
			}
			if _, err := respCall(ctx, addr, "DEL", k); err != nil {
				return fmt.Errorf("DEL %s on %s: %w", k, addr, err)
			}
		}
		return nil
	})
}

// procs returns the running processes of the cluster's nodes.
func (c *RedisClusterServer) procs() []*process {
	var out []*process
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.proc != nil {
			out = append(out, n.proc)
		}
		n.mu.Unlock()
	}
	return out
}

// logFiles lists the log files of the cluster's nodes.
func (c *RedisClusterServer) logFiles() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.logFiles()...)
	}
	return out
}

// destroy stops every node and removes their directories.
func (c *RedisClusterServer) destroy() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.destroy())
	}
	return errors.Join(errs...)
}

// Addrs returns the addresses of the three masters, in slot order.
func (c *RedisClusterServer) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes returns the cluster's nodes, in slot order. They can be paused,
// stopped and started individually like any [RedisServer].
func (c *RedisClusterServer) Nodes() []*RedisServer {
	return append([]*RedisServer(nil), c.nodes...)
}

// keyInSlots returns the first key of the form prefix:N whose hash slot lies
// in [lo, hi].
func keyInSlots(prefix string, lo, hi int) string {
	for i := 0; ; i++ {
		k := prefix + ":" + strconv.Itoa(i)
		if s := KeySlot(k); s >= lo && s <= hi {
			return k
		}
	}
}

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its hash tag when it has a non-empty one, modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
