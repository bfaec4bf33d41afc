package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/etcdstore"
)

// List pages through every key with a fence record, in key order, with
// the current holder's description; a released key is not listed.
func TestListLeases(t *testing.T) {
	t.Parallel()
	srv := testenv.Etcd(t)
	s := newEtcd(t, newClient(t, srv.Endpoints()...), &etcdstore.Options{Prefix: "list-test/"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ha := s.Leases().(leasedriver.HolderAcquirer)
	toks := map[string]string{}
	for _, k := range []string{"jobs/b", "jobs/a", "jobs/c", "jobt", "other/x"} {
		toks[k] = lease.NewToken()
		if _, err := ha.AcquireHolder(ctx, k, toks[k], 30*time.Second, "node "+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Leases().Release(ctx, "jobs/b", toks["jobs/b"]); err != nil {
		t.Fatal(err)
	}
	l := s.Leases().(lease.Lister)
	// The released key is gone: nothing of an ended lease is kept.
	page, err := l.List(ctx, "jobs/", "", 1)
	if err != nil || len(page) != 1 || page[0].Key != "jobs/a" {
		t.Fatalf("first page %+v, %v", page, err)
	}
	if !page[0].Held || page[0].Holder != "node jobs/a" || page[0].TTL <= 0 || page[0].Fence == 0 {
		t.Fatalf("held key %+v", page[0])
	}
	page, err = l.List(ctx, "jobs/", page[0].Key, 10)
	if err != nil || len(page) != 1 || page[0].Key != "jobs/c" || page[0].Holder != "node jobs/c" {
		t.Fatalf("second page %+v, %v", page, err)
	}
	all, err := l.List(ctx, "", "", 10)
	if err != nil || len(all) != 4 {
		t.Fatalf("all keys %+v, %v; want the 4 held", all, err)
	}
}
