package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// redisClient connects a rueidis client with retries disabled to addrs and
// closes it when the test ends.
func redisClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// etcdClient returns a client for every member of s, closed when the test
// ends.
func etcdClient(t testing.TB, s *testenv.EtcdServer) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client for %v: %v", s.Endpoints(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pgxPool returns a pgx connection pool for dsn, closed when the test
// ends. Connections are made lazily, so it can be created while the
// server is down.
func pgxPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgx pool for %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ctx returns a context that ends after d or with the test.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// eventually retries f every 50ms until it succeeds or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fakeTB records Skipf and Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper()                          {}
func (f *fakeTB) Skipf(format string, args ...any) { f.skipped = fmt.Sprintf(format, args...) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
}

func TestRequireBinary(t *testing.T) {
	if p := testenv.RequireBinary(t, "redis-server"); !strings.HasPrefix(p, "/") {
		t.Fatalf("RequireBinary(redis-server) = %q, want an absolute path", p)
	}
	if p := testenv.RequireBinary(t, "initdb"); !strings.HasSuffix(p, "/initdb") {
		t.Fatalf("RequireBinary(initdb) = %q", p)
	}

	t.Setenv(testenv.RequireEnv, "")
	f := &fakeTB{TB: t}
	testenv.RequireBinary(f, "redis-server-that-does-not-exist")
	if f.fatal != "" || !strings.Contains(f.skipped, "redis-server-that-does-not-exist") {
		t.Fatalf("without %s: skipped=%q fatal=%q, want a skip naming the binary", testenv.RequireEnv, f.skipped, f.fatal)
	}

	t.Setenv(testenv.RequireEnv, "1")
	f = &fakeTB{TB: t}
	t.Setenv("PATH", "/nonexistent")
	testenv.RequireBinary(f, "etcd")
	if f.skipped != "" || !strings.Contains(f.fatal, "etcd") || !strings.Contains(f.fatal, "apt-get install etcd-server") {
		t.Fatalf("with %s=1: skipped=%q fatal=%q, want a failure with an install hint", testenv.RequireEnv, f.skipped, f.fatal)
	}
}

func TestRedisVolatile(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t, &testenv.RedisOptions{MaxMemory: "64mb", MaxMemoryPolicy: "allkeys-lru"})
	c := redisClient(t, s.Addr())
	if err := c.Do(ctx(t, 5*time.Second), c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx(t, 5*time.Second), c.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	cfg, err := c.Do(ctx(t, 5*time.Second), c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil || cfg["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("CONFIG GET maxmemory-policy = %v, %v", cfg, err)
	}

	addr := s.Addr()
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr())
	}
	c = redisClient(t, s.Addr())
	err = c.Do(ctx(t, 5*time.Second), c.B().Get().Key("k").Build()).Error()
	if !rueidis.IsRedisNil(err) {
		t.Fatalf("GET k after restart without persistence: err = %v, want nil reply", err)
	}
}

func TestRedisPersist(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t, &testenv.RedisOptions{Persist: true})
	c := redisClient(t, s.Addr())
	if err := c.Do(ctx(t, 5*time.Second), c.B().Set().Key("k").Value("kept").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Stop(t)
	if err := c.Do(ctx(t, 2*time.Second), c.B().Get().Key("k").Build()).Error(); err == nil {
		t.Fatal("GET succeeded against a stopped server")
	}
	s.Start(t)
	c = redisClient(t, s.Addr())
	if v, err := c.Do(ctx(t, 5*time.Second), c.B().Get().Key("k").Build()).ToString(); err != nil || v != "kept" {
		t.Fatalf("GET k after restart with persistence = %q, %v", v, err)
	}
}

func TestRedisPause(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t, nil)
	c := redisClient(t, s.Addr())
	s.Pause(t)
	err := c.Do(ctx(t, 300*time.Millisecond), c.B().Ping().Build()).Error()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PING to a paused server: err = %v, want a deadline error", err)
	}
	s.Resume(t)
	eventually(t, 5*time.Second, "PING after resume", func() error {
		return c.Do(ctx(t, time.Second), c.B().Ping().Build()).Error()
	})
}

func TestSharedRedis(t *testing.T) {
	t.Parallel()
	s := testenv.SharedRedis(t)
	if s2 := testenv.SharedRedis(t); s2 != s {
		t.Fatal("SharedRedis returned two different servers")
	}
	c := redisClient(t, s.Addr())
	key := "TestSharedRedis:k"
	if err := c.Do(ctx(t, 5*time.Second), c.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx(t, 5*time.Second), c.B().Get().Key(key).Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET = %q, %v", v, err)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.SharedRedisCluster(t)
	if cl2 := testenv.SharedRedisCluster(t); cl2 != cl {
		t.Fatal("SharedRedisCluster returned two different clusters")
	}
	addrs := cl.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v, want 3 masters", addrs)
	}
	c := redisClient(t, cl.Addrs()...)
	nodes := c.Nodes()
	ranges := [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, r := range ranges {
		// Find a key of this range, and check our slot function agrees
		// with the server's.
		var key string
		for n := 0; ; n++ {
			key = "TestRedisCluster:" + strconv.Itoa(n)
			if s := int64(testenv.KeySlot(key)); s >= r[0] && s <= r[1] {
				break
			}
		}
		slot, err := c.Do(ctx(t, 5*time.Second), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil || slot < r[0] || slot > r[1] || slot != int64(testenv.KeySlot(key)) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; KeySlot = %d; want in %v", key, slot, err, testenv.KeySlot(key), r)
		}
		val := "value-" + strconv.Itoa(i)
		if err := c.Do(ctx(t, 5*time.Second), c.B().Set().Key(key).Value(val).Build()).Error(); err != nil {
			t.Fatalf("SET %s (slot %d): %v", key, slot, err)
		}
		if v, err := c.Do(ctx(t, 5*time.Second), c.B().Get().Key(key).Build()).ToString(); err != nil || v != val {
			t.Fatalf("GET %s = %q, %v", key, v, err)
		}
		// The key must live on the master owning the range.
		node, ok := nodes[addrs[i]]
		if !ok {
			t.Fatalf("client does not know node %s (knows %v)", addrs[i], nodes)
		}
		n, err := node.Do(ctx(t, 5*time.Second), node.B().ClusterCountkeysinslot().Slot(slot).Build()).AsInt64()
		if err != nil || n < 1 {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT %d on %s = %d, %v; want the key there", slot, addrs[i], n, err)
		}
		if err := c.Do(ctx(t, 5*time.Second), c.B().Del().Key(key).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	if !strings.HasPrefix(s.DSN("x"), "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(s.DSN("x"), "/x?sslmode=disable") {
		t.Fatalf("DSN = %q", s.DSN("x"))
	}
	pool := pgxPool(t, s.DSN("postgres"))
	if _, err := pool.Exec(ctx(t, 10*time.Second), `CREATE TABLE kv (k text PRIMARY KEY, v text); INSERT INTO kv VALUES ('a', 'kept')`); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	var v string
	// The pool's old connections died with the server; a fresh pool
	// avoids depending on how quickly pgxpool notices.
	pool = pgxPool(t, s.DSN("postgres"))
	if err := pool.QueryRow(ctx(t, 10*time.Second), `SELECT v FROM kv WHERE k = 'a'`).Scan(&v); err != nil || v != "kept" {
		t.Fatalf("after restart: v = %q, %v", v, err)
	}

	// Pausing must freeze the backends of open connections too, not only
	// the postmaster.
	conn, err := pool.Acquire(ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.Pause(t)
	if _, err := conn.Exec(ctx(t, 500*time.Millisecond), `SELECT 1`); err == nil {
		t.Fatal("query on an open connection to a paused server succeeded")
	}
	conn.Release()
	if c, err := pgx.Connect(ctx(t, 500*time.Millisecond), s.DSN("postgres")); err == nil {
		c.Close(context.Background())
		t.Fatal("connected to a paused server")
	}
	s.Resume(t)
	if err := pool.Ping(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("ping after resume: %v", err)
	}
}

func TestSharedPostgresNewDatabase(t *testing.T) {
	t.Parallel()
	s := testenv.SharedPostgres(t)
	if s2 := testenv.SharedPostgres(t); s2 != s {
		t.Fatal("SharedPostgres returned two different servers")
	}
	var dbA string
	t.Run("isolation", func(t *testing.T) {
		dbA = s.NewDatabase(t)
		dbB := s.NewDatabase(t)
		if dbA == dbB {
			t.Fatalf("NewDatabase returned %q twice", dbA)
		}
		a, b := pgxPool(t, dbA), pgxPool(t, dbB)
		if _, err := a.Exec(ctx(t, 10*time.Second), `CREATE TABLE only_in_a (x int)`); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.QueryRow(ctx(t, 10*time.Second), `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("table of database A seen in database B: n = %d, %v", n, err)
		}
		if err := a.QueryRow(ctx(t, 10*time.Second), `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table missing from database A: n = %d, %v", n, err)
		}
	})
	// The subtest's cleanup must have dropped its databases.
	cfg, err := pgx.ParseConfig(dbA)
	if err != nil {
		t.Fatal(err)
	}
	admin := pgxPool(t, s.DSN("postgres"))
	var n int
	if err := admin.QueryRow(ctx(t, 10*time.Second), `SELECT count(*) FROM pg_database WHERE datname = $1`, cfg.Database).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s still exists after its test: n = %d, %v", cfg.Database, n, err)
	}
}

func etcdPutGet(t *testing.T, c *clientv3.Client, key, val string) {
	t.Helper()
	if _, err := c.Put(ctx(t, 10*time.Second), key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp, err := c.Get(ctx(t, 10*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
		t.Fatalf("get %s = %v, %v; want %q", key, resp, err, val)
	}
}

func TestEtcd(t *testing.T) {
	t.Parallel()
	s := testenv.Etcd(t)
	if eps := s.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v", eps)
	}
	c := etcdClient(t, s)
	etcdPutGet(t, c, "k", "kept")
	s.Restart(t)
	eventually(t, 10*time.Second, "get after restart", func() error {
		resp, err := c.Get(ctx(t, 2*time.Second), "k")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
			return fmt.Errorf("get k = %v", resp.Kvs)
		}
		return nil
	})
}

func TestSharedEtcd(t *testing.T) {
	t.Parallel()
	s := testenv.SharedEtcd(t)
	if s2 := testenv.SharedEtcd(t); s2 != s {
		t.Fatal("SharedEtcd returned two different servers")
	}
	etcdPutGet(t, etcdClient(t, s), "TestSharedEtcd/k", "v")
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	s := testenv.EtcdCluster(t, 3)
	if n := len(s.Endpoints()); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}
	c := etcdClient(t, s)
	etcdPutGet(t, c, "a", "1")
	members, err := c.MemberList(ctx(t, 10*time.Second))
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("member list = %v, %v", members, err)
	}

	s.StopMember(t, 0)
	eventually(t, 15*time.Second, "put with member 0 stopped", func() error {
		_, err := c.Put(ctx(t, 2*time.Second), "b", "2")
		return err
	})

	// Without a quorum the cluster stops serving writes; bringing one
	// member back restores it.
	s.StopMember(t, 1)
	if _, err := c.Put(ctx(t, 1500*time.Millisecond), "c", "3"); err == nil {
		t.Fatal("put succeeded with two of three members stopped")
	}
	s.StartMember(t, 1)
	eventually(t, 15*time.Second, "put with quorum restored", func() error {
		_, err := c.Put(ctx(t, 2*time.Second), "c", "3")
		return err
	})

	s.StartMember(t, 0)
	// Member 0 alone must have caught up with the write it missed.
	one, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints()[:1], DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	eventually(t, 10*time.Second, "get b from member 0", func() error {
		resp, err := one.Get(ctx(t, 2*time.Second), "b")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
			return fmt.Errorf("b = %v", resp.Kvs)
		}
		return nil
	})

	// A full stop keeps the data; members come back one by one, the first
	// without a quorum to be healthy in.
	s.Stop(t)
	s.StartMember(t, 2)
	s.StartMember(t, 0)
	s.Start(t)
	// A fresh client: the old one's connections are in gRPC's reconnect
	// backoff after every member went away.
	c = etcdClient(t, s)
	eventually(t, 10*time.Second, "get c after a full restart", func() error {
		resp, err := c.Get(ctx(t, 2*time.Second), "c")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
			return fmt.Errorf("c = %v", resp.Kvs)
		}
		return nil
	})
}

func TestProxyRedis(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t, nil)
	direct := redisClient(t, s.Addr())
	p := testenv.NewProxy(t, s.Addr())
	// One connection only: rueidis otherwise spreads commands over
	// several lazily opened connections, and one opened while replies are
	// dropped never gets past its handshake, so its SET would never be
	// sent at all.
	proxied, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableRetry: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	get := func(c rueidis.Client, key string) (string, error) {
		return c.Do(ctx(t, 2*time.Second), c.B().Get().Key(key).Build()).ToString()
	}
	if err := proxied.Do(ctx(t, 2*time.Second), proxied.B().Set().Key("a").Value("1").Build()).Error(); err != nil {
		t.Fatalf("SET through a healthy proxy: %v", err)
	}

	p.DropReplies()
	err = proxied.Do(ctx(t, 500*time.Millisecond), proxied.B().Set().Key("b").Value("2").Build()).Error()
	if err == nil {
		t.Fatal("SET through a proxy dropping replies got a reply")
	}
	eventually(t, 5*time.Second, "SET b applied despite the dropped reply", func() error {
		v, err := get(direct, "b")
		if err == nil && v != "2" {
			err = fmt.Errorf("b = %q", v)
		}
		return err
	})

	p.Heal()
	eventually(t, 10*time.Second, "GET through a healed proxy", func() error {
		_, err := get(proxied, "a")
		return err
	})

	p.Cut()
	for range 3 {
		if _, err := get(proxied, "a"); err == nil {
			t.Fatal("GET through a cut proxy succeeded")
		}
	}
	if c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableRetry: true}); err == nil {
		c.Close()
		t.Fatal("new client connected through a cut proxy")
	}

	p.Heal()
	eventually(t, 10*time.Second, "GET through a healed proxy", func() error {
		v, err := get(proxied, "b")
		if err == nil && v != "2" {
			err = fmt.Errorf("b = %q", v)
		}
		return err
	})
}

func TestProxyPostgres(t *testing.T) {
	t.Parallel()
	s := testenv.SharedPostgres(t)
	p := testenv.NewProxy(t, s.Addr())
	dsn := "postgres://postgres@" + p.Addr() + "/postgres?sslmode=disable&connect_timeout=2"
	conn, err := pgx.Connect(ctx(t, 5*time.Second), dsn)
	if err != nil {
		t.Fatalf("connect through proxy: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := conn.Ping(ctx(t, 2*time.Second)); err == nil {
		t.Fatal("ping through a cut proxy succeeded")
	}
	p.Heal()
	conn2, err := pgx.Connect(ctx(t, 5*time.Second), dsn)
	if err != nil {
		t.Fatalf("connect through a healed proxy: %v", err)
	}
	defer conn2.Close(context.Background())
	if err := conn2.Ping(ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A durable server keeps every acknowledged commit across an immediate
// stop, which skips the shutdown checkpoint and leaves recovery to the
// next start.
func TestPostgresDurableStopImmediate(t *testing.T) {
	t.Parallel()
	s := testenv.PostgresWith(t, &testenv.PostgresOptions{Durable: true})
	pool := pgxPool(t, s.DSN("postgres"))
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx(t, 10*time.Second), `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || syncCommit != "on" {
		t.Fatalf("fsync = %s, synchronous_commit = %s, want on and on", fsync, syncCommit)
	}
	if _, err := pool.Exec(ctx(t, 10*time.Second), `CREATE TABLE n (i int)`); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := pool.Exec(ctx(t, 10*time.Second), `INSERT INTO n VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	s.StopImmediate(t)
	if _, err := pool.Exec(ctx(t, time.Second), `SELECT 1`); err == nil {
		t.Fatal("query succeeded against a stopped server")
	}
	s.Start(t)
	pool = pgxPool(t, s.DSN("postgres"))
	var n int
	if err := pool.QueryRow(ctx(t, 10*time.Second), `SELECT count(*) FROM n`).Scan(&n); err != nil || n != 50 {
		t.Fatalf("after an immediate stop: %d rows, %v; want 50", n, err)
	}
}

// A replica promoted after its primary was killed serves what it had
// replicated and takes writes; a proxy switched to it carries clients
// over.
func TestRedisReplicaFailover(t *testing.T) {
	t.Parallel()
	primary := testenv.Redis(t, nil)
	replica := testenv.RedisReplica(t, primary)
	p := testenv.NewProxy(t, primary.Addr())
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(ctx(t, 2*time.Second), c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	direct := redisClient(t, replica.Addr())
	eventually(t, 5*time.Second, "k replicated", func() error {
		v, err := direct.Do(ctx(t, time.Second), direct.B().Get().Key("k").Build()).ToString()
		if err == nil && v != "v" {
			err = fmt.Errorf("k = %q", v)
		}
		return err
	})
	if err := direct.Do(ctx(t, time.Second), direct.B().Set().Key("x").Value("1").Build()).Error(); err == nil {
		t.Fatal("a replica accepted a write before its promotion")
	}

	primary.Kill(t)
	replica.Promote(t)
	p.SetUpstream(replica.Addr())
	if p.Upstream() != replica.Addr() {
		t.Fatalf("upstream %s, want %s", p.Upstream(), replica.Addr())
	}
	eventually(t, 10*time.Second, "write through the proxy after the failover", func() error {
		return c.Do(ctx(t, time.Second), c.B().Set().Key("k2").Value("w").Build()).Error()
	})
	if v, err := direct.Do(ctx(t, time.Second), direct.B().Get().Key("k2").Build()).ToString(); err != nil || v != "w" {
		t.Fatalf("k2 on the promoted replica = %q, %v", v, err)
	}
	replica.Restart(t) // stays a primary
	direct = redisClient(t, replica.Addr())
	if err := direct.Do(ctx(t, 2*time.Second), direct.B().Set().Key("x").Value("1").Build()).Error(); err != nil {
		t.Fatalf("write after restarting the promoted replica: %v", err)
	}
}

// Hold keeps connections up and requests flowing but keeps the server's
// replies until Release, which delivers them in order; HoldWhere holds only
// the connections whose client sent the marker.
func TestProxyHold(t *testing.T) {
	t.Parallel()
	s := testenv.SharedRedis(t)
	direct := redisClient(t, s.Addr())
	p := testenv.NewProxy(t, s.Addr())
	dial := func() rueidis.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableRetry: true, PipelineMultiplex: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	held, free := dial(), dial()
	key := "testenv:hold:" + t.Name()
	// Mark the first client's connection: it sends the marker as a value.
	if err := held.Do(ctx(t, 2*time.Second), held.B().Set().Key(key+":m").Value("HOLDME").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p.HoldWhere("HOLDME")
	if err := free.Do(ctx(t, 2*time.Second), free.B().Set().Key(key+":free").Value("1").Build()).Error(); err != nil {
		t.Fatalf("a connection without the marker is held: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- held.Do(ctx(t, 30*time.Second), held.B().Set().Key(key).Value("v").Build()).Error() }()
	// The request reaches the server while its reply is held back.
	eventually(t, 10*time.Second, "SET applied while its reply is held", func() error {
		v, err := direct.Do(ctx(t, time.Second), direct.B().Get().Key(key).Build()).ToString()
		if err == nil && v != "v" {
			err = fmt.Errorf("%s = %q", key, v)
		}
		return err
	})
	select {
	case err := <-done:
		t.Fatalf("the held reply arrived before Release: %v", err)
	default:
	}
	p.Release()
	if err := <-done; err != nil {
		t.Fatalf("the reply after Release: %v", err)
	}
	p.Hold()
	fast, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := free.Do(fast, free.B().Get().Key(key).Build()).Error(); err == nil {
		t.Fatal("Hold let a reply through")
	}
}

// A replica behind a held link lags while the primary still counts it as
// connected; the failover promotes it with what it had, and Front follows.
func TestRedisFailoverHarness(t *testing.T) {
	t.Parallel()
	f := testenv.NewRedisFailover(t, nil)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{f.Addr()}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set := func(k string) error {
		return c.Do(ctx(t, 2*time.Second), c.B().Set().Key(k).Value("1").Build()).Error()
	}
	if err := set("before"); err != nil {
		t.Fatal(err)
	}
	replica := redisClient(t, f.Replica.Addr())
	eventually(t, 10*time.Second, "before replicated", func() error {
		return replica.Do(ctx(t, time.Second), replica.B().Get().Key("before").Build()).Error()
	})
	f.HoldReplication()
	if err := set("during"); err != nil {
		t.Fatal(err)
	}
	primary := redisClient(t, f.Primary.Addr())
	dc, release := primary.Dedicate()
	res := dc.DoMulti(ctx(t, 5*time.Second), dc.B().Set().Key("during2").Value("1").Build(), dc.B().Wait().Numreplicas(1).Timeout(200).Build())
	release()
	if n, err := res[1].AsInt64(); err != nil || n != 0 {
		t.Fatalf("WAIT while replication is held = %d, %v; want 0 replicas", n, err)
	}
	info, err := primary.Do(ctx(t, time.Second), primary.B().Info().Section("replication").Build()).ToString()
	if err != nil || !strings.Contains(info, "connected_slaves:1") || !strings.Contains(info, "state=online") {
		t.Fatalf("the primary no longer counts the held replica: %s %v", info, err)
	}
	f.Failover(t)
	eventually(t, 10*time.Second, "a write after the failover", func() error { return set("after") })
	if n, err := replica.Do(ctx(t, time.Second), replica.B().Exists().Key("before", "during", "during2", "after").Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("keys on the promoted replica: %d, %v; want before and after only", n, err)
	}
}
