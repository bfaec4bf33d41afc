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
	db, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
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
	db, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
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

// TryDo runs fn under the lease only if the key is free now: a job that
// another instance is already running is skipped, not queued.
func ExampleLocker_TryDo() {
	ctx := context.Background()
	db, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		panic(err)
	}
	busy, err := locker.TryAcquire(ctx, "reindex", 10*time.Second)
	if err != nil {
		panic(err)
	}
	err = locker.TryDo(ctx, "reindex", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		return nil // not reached: another holder has the key
	})
	fmt.Println(errors.Is(err, lease.ErrHeld))

	busy.Release(ctx)
	err = locker.TryDo(ctx, "reindex", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		fmt.Println("reindexing under fence", l.Fence() > 0)
		return nil
	})
	fmt.Println(err)
	// Output:
	// true
	// reindexing under fence true
	// <nil>
}
