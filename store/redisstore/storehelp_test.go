package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/redisstore"
)

// newGoRedis returns redisstore.NewGoRedis(c, o), failing t on an error.
func newGoRedis(t testing.TB, c redis.UniversalClient, o *redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewGoRedis(c, o)
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

// must returns s, or panics with err: for the conformance factories, which
// build stores where no *testing.T is at hand.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}
