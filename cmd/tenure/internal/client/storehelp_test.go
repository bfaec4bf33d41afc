package client_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

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
