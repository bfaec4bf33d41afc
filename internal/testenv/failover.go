package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisFailover is a Redis primary and its replica set up for failover
// tests: the replica replicates through Link, a [Proxy] that can hold back
// the replication stream while the link stays up (the primary still counts
// the replica as connected, the replica applies nothing new), and clients
// connect through Front, a proxy that [RedisFailover.Failover] switches to
// the promoted replica, as Sentinel or a managed service would move the
// primary's address.
type RedisFailover struct {
	Primary, Replica *RedisServer
	// Link carries the replication stream from the primary to the
	// replica.
	Link *Proxy
	// Front is where clients connect: the primary, and after Failover the
	// promoted replica.
	Front *Proxy
}

// NewRedisFailover starts a primary configured by o (which may be nil), a
// replica through a proxy and a proxy for clients, and waits until the
// replica is in sync and the primary lists it as online. Everything stops
// when the test ends.
func NewRedisFailover(t testing.TB, o *RedisOptions) *RedisFailover {
	t.Helper()
	f := &RedisFailover{Primary: Redis(t, o)}
	f.Link = NewProxy(t, f.Primary.Addr())
	f.Replica = RedisReplicaVia(t, f.Primary, f.Link.Addr())
	f.Front = NewProxy(t, f.Primary.Addr())
	return f
}

// Addr is the address clients connect to (Front's).
func (f *RedisFailover) Addr() string { return f.Front.Addr() }

// HoldReplication holds back the replication stream: from now on the
// replica receives nothing the primary writes, until the failover (which
// loses it) or [RedisFailover.ReleaseReplication].
func (f *RedisFailover) HoldReplication() { f.Link.Hold() }

// ReleaseReplication delivers what was held back and lets replication
// flow again.
func (f *RedisFailover) ReleaseReplication() { f.Link.Release() }

// Failover kills the primary (SIGKILL, as a crash), promotes the replica
// (REPLICAOF NO ONE) with whatever it has received, and points Front at
// it. What the replication link held back is lost.
func (f *RedisFailover) Failover(t testing.TB) {
	t.Helper()
	f.Primary.Kill(t)
	f.Replica.Promote(t)
	f.Front.SetUpstream(f.Replica.Addr())
}

// RedisClusterFailover is a three-master Redis Cluster (as [RedisCluster])
// whose first master, owning slots 0-5460, has a replica. That master is
// announced at Link's address (cluster-announce-port), so clients and the
// replica both reach it through Link, and [RedisClusterFailover.HoldReplication]
// holds back the replication stream alone (the connection on which the
// replica sent REPLCONF).
type RedisClusterFailover struct {
	*RedisClusterServer
	// Replica replicates the first master.
	Replica *RedisServer
	// Link is the first master's announced address.
	Link *Proxy
}

// NewRedisClusterFailover starts the cluster and the replica and waits
// until the replica is in sync, the master lists it as online and every
// node knows the master at Link's address. Everything stops when the test
// ends.
func NewRedisClusterFailover(t testing.TB) *RedisClusterFailover {
	t.Helper()
	c := &RedisClusterFailover{RedisClusterServer: RedisCluster(t)}
	bin := RequireBinary(t, "redis-server")
	m := c.nodes[0]
	c.Link = NewProxy(t, m.Addr())
	_, lport, _ := net.SplitHostPort(c.Link.Addr())
	m.mu.Lock()
	bus := strconv.Itoa(m.busPort)
	m.mu.Unlock()
	r, err := newRedis(bin, nil, true)
	if err != nil {
		defer r.destroy()
		failStart(t, err, r.logFiles()...)
	}
	c.Replica = r
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, "redis cluster replica", r.logPath)
		}
		if err := r.destroy(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, kv := range [][2]string{{"cluster-announce-bus-port", bus}, {"cluster-announce-port", lport}} {
		if _, err := respCall(ctx, m.Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatalf("testenv: redis cluster node %s: CONFIG SET %s: %v", m.Addr(), kv[0], err)
		}
	}
	id, err := respCall(ctx, m.Addr(), "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("testenv: redis cluster node %s: CLUSTER MYID: %v", m.Addr(), err)
	}
	if _, err := respCall(ctx, r.Addr(), "CLUSTER", "MEET", "127.0.0.1", lport, bus); err != nil {
		t.Fatalf("testenv: redis cluster replica %s: CLUSTER MEET: %v", r.Addr(), err)
	}
	procs := append(c.procs(), r.proc)
	err = waitUntil("redis cluster replica joined", startTimeout, procs, func(ctx context.Context) error {
		// Every node knows the master at the proxy's port, and the
		// replica knows the master.
		for _, n := range append(c.Nodes(), r) {
			nodes, err := respCall(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			if !strings.Contains(nodes, id+" 127.0.0.1:"+lport+"@") {
				return fmt.Errorf("node %s does not know the master at port %s yet", n.Addr(), lport)
			}
		}
		_, err := respCall(ctx, r.Addr(), "CLUSTER", "REPLICATE", id)
		return err
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	err = waitUntil("redis cluster replica in sync", startTimeout, procs, func(ctx context.Context) error {
		info, err := respCall(ctx, r.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
			return errors.New("not in sync yet")
		}
		minfo, err := respCall(ctx, m.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(minfo, "state=online") {
			return errors.New("the master does not list the replica as online yet")
		}
		// Every master knows the replica as the first master's replica,
		// so that a takeover is accepted everywhere.
		for _, n := range c.Nodes() {
			nodes, err := respCall(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			if !strings.Contains(nodes, "slave "+id) {
				return fmt.Errorf("node %s does not know the replica yet", n.Addr())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c
}

// Addrs returns the addresses to seed clients with: the three masters' own
// addresses (clients learn the first one at Link's address from the
// cluster) and the replica's.
func (c *RedisClusterFailover) Addrs() []string {
	return append(c.RedisClusterServer.Addrs(), c.Replica.Addr())
}

// HoldReplication holds back the first master's replication stream: the
// replica receives nothing it writes from now on, while clients' requests
// and replies still flow through Link.
func (c *RedisClusterFailover) HoldReplication() { c.Link.HoldWhere("REPLCONF") }

// ReleaseReplication delivers what was held back.
func (c *RedisClusterFailover) ReleaseReplication() { c.Link.Release() }

// Failover kills the first master (SIGKILL), makes its replica take its
// slots over at once (CLUSTER FAILOVER TAKEOVER: no agreement of the
// other masters, the way an operator forces a failover) with whatever it
// has received, and waits until the other masters route slot 0 to it.
func (c *RedisClusterFailover) Failover(t testing.TB) {
	t.Helper()
	c.nodes[0].Kill(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := respCall(ctx, c.Replica.Addr(), "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("testenv: CLUSTER FAILOVER TAKEOVER on %s: %v", c.Replica.Addr(), err)
	}
	_, port, _ := net.SplitHostPort(c.Replica.Addr())
	err := waitUntil("redis cluster failover", startTimeout, c.procs(), func(ctx context.Context) error {
		for _, n := range append(c.Nodes()[1:], c.Replica) {
			nodes, err := respCall(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			if !masterOfSlot0(nodes, port) {
				return fmt.Errorf("node %s does not route slot 0 to %s yet", n.Addr(), c.Replica.Addr())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// masterOfSlot0 reports whether a CLUSTER NODES reply names the node on
// port as the master serving slot 0.
func masterOfSlot0(nodes, port string) bool {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || !strings.HasPrefix(f[1], "127.0.0.1:"+port+"@") {
			continue
		}
		for _, r := range f[8:] {
			if lo, _, _ := strings.Cut(r, "-"); lo == "0" {
				return true
			}
		}
	}
	return false
}
