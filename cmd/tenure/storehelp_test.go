package main

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// newEtcd returns etcdstore.New(c, o), failing t on an error.
func newEtcd(t testing.TB, c *clientv3.Client, o *etcdstore.Options) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newPG returns pgstore.New(pool, o), failing t on an error.
func newPG(t testing.TB, pool *pgxpool.Pool, o *pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newRedis returns redisstore.New(c, o), failing t on an error.
func newRedis(t testing.TB, c rueidis.Client, o *redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
