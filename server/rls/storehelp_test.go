package rls_test

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// newMem returns memstore.New(o), failing t on an error.
func newMem(t testing.TB, o *memstore.Options) *memstore.Store {
	t.Helper()
	s, err := memstore.New(o)
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
