package client_test

import (
	"context"
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

// redisClient connects a rueidis client with retries disabled to addr and
// closes it when the test ends.
func redisClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}
