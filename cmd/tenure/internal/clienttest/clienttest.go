// Package clienttest builds the store clients and stores the command's
// tests use, each closed when its test ends and failing the test on an
// error.
package clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// NewEtcd returns etcdstore.New(c, o), failing t on an error.
func NewEtcd(t testing.TB, c *clientv3.Client, o *etcdstore.Options) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewPG returns pgstore.New(pool, o), failing t on an error.
func NewPG(t testing.TB, pool *pgxpool.Pool, o *pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewRedis returns redisstore.New(c, o), failing t on an error.
func NewRedis(t testing.TB, c rueidis.Client, o *redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// PGXPool returns a pgx connection pool for dsn, closed when the test
// ends. Connections are made lazily, so it can be created while the
// server is down.
func PGXPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgx pool for %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RedisClient connects a rueidis client with retries disabled to addr and
// closes it when the test ends.
func RedisClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// EtcdClient returns a client for every member of s, closed when the test
// ends.
func EtcdClient(t testing.TB, s *testenv.EtcdServer) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client for %v: %v", s.Endpoints(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
