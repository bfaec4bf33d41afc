package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
)

// TestListLeasesSQLite lists leases through the client on serve over
// SQLite: prefix, order, paging, held and released keys; bad limits are
// refused.
func TestListLeasesSQLite(t *testing.T) {
	s := startSQLite(t, "", nil)
	c := newClient(t, s.url, nil)
	ctx := t.Context()
	ls := c.Leases()
	for _, k := range []string{"b/2", "a/1", "b/1", "b/3"} {
		if _, err := ls.Acquire(ctx, k, lease.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tok := lease.NewToken()
	if _, err := ls.Acquire(ctx, "b/0", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx, "b/0", tok); err != nil {
		t.Fatal(err)
	}
	l := ls.(lease.Lister)
	page, err := l.List(ctx, "b/", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || page[0].Key != "b/0" || page[0].Held || page[0].Fence == 0 || page[1].Key != "b/1" || !page[1].Held || page[2].Key != "b/2" {
		t.Fatalf("page 1: %+v", page)
	}
	page, err = l.List(ctx, "b/", page[2].Key, 3)
	if err != nil || len(page) != 1 || page[0].Key != "b/3" {
		t.Fatalf("page 2: %+v %v", page, err)
	}
	if _, err := l.List(ctx, "", "", 0); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("limit 0: %v", err)
	}
}
