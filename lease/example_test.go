package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
)

func Example() {
	ctx := context.Background()
	db := memstore.New(nil)
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		panic(err)
	}

	l, err := locker.TryAcquire(ctx, "report:tenant-42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// A second caller finds the key held.
	_, err = locker.TryAcquire(ctx, "report:tenant-42", 10*time.Second)
	fmt.Println("second caller held out:", errors.Is(err, lease.ErrHeld))

	// The write carries the fence; the guard refuses older fences.
	if err := db.FencedSet(ctx, "report:tenant-42", l.Fence(), []byte("done")); err != nil {
		panic(err)
	}
	fmt.Println("release:", l.Release(ctx))
	// Output:
	// second caller held out: true
	// release: <nil>
}

func ExampleLocker_Do() {
	ctx := context.Background()
	db := memstore.New(nil)
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		panic(err)
	}

	// Do waits for the key, renews the lease every ttl/3 while fn runs, and
	// cancels fn's context before the lease could expire.
	err = locker.Do(ctx, "nightly-settlement", 5*time.Second, func(ctx context.Context, l *lease.Lease) error {
		return db.FencedSet(ctx, "ledger", l.Fence(), []byte("settled"))
	})
	v, _, _ := db.FencedGet(ctx, "ledger")
	fmt.Println(err, string(v))
	// Output: <nil> settled
}
