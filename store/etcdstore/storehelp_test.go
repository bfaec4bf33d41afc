package etcdstore_test

import (
	"testing"

	"github.com/tenurekit/tenure/store/etcdstore"
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

// must returns s, or panics with err: for the conformance factories, which
// build stores where no *testing.T is at hand.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}
