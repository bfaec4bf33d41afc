package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// A holder description given through the API is kept by the store and
// reported by inspect, list and a held refusal.
func TestHolderThroughServe(t *testing.T) {
	s := startSQLite(t, "", nil)
	ls := newClient(t, s.url, nil).Leases()
	lk, err := lease.New(ls, &lease.Options{Holder: "billing-7 nightly close"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(t.Context(), "close", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	info, err := ls.Inspect(t.Context(), "close")
	if err != nil || info.Holder != "billing-7 nightly close" || info.Fence != l.Fence() {
		t.Fatalf("inspect: %+v %v", info, err)
	}
	page, err := ls.(lease.Lister).List(t.Context(), "", "", 10)
	if err != nil || len(page) != 1 || page[0].Holder != "billing-7 nightly close" {
		t.Fatalf("list: %+v %v", page, err)
	}
	_, err = ls.Acquire(t.Context(), "close", lease.NewToken(), time.Minute)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Holder != "billing-7 nightly close" {
		t.Fatalf("second acquire: %v (%+v)", err, held)
	}
	if _, err := ls.(leasedriver.HolderAcquirer).AcquireHolder(t.Context(), "other", lease.NewToken(), time.Minute, "bad\x00holder"); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("a holder with NUL: %v, want ErrInvalid", err)
	}
}
