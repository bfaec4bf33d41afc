package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
)

// A job runs under a lease, and its writes carry the lease: FencedPut
// refuses an older holder's late write, and Compare makes the caller's own
// transaction apply only while the lease is the key's current tenure.
func Example() {
	ctx := context.Background()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	es, err := etcdstore.New(c, nil) // keys under "tenure/"
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(es.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}

	err = locker.Do(ctx, "jobs/nightly-report", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		// A max-fence guard on a value kept in etcd.
		if err := es.FencedPut(ctx, "reports/latest", "2026-11-01", l.Fence()); errors.Is(err, fence.ErrStale) {
			return err // a newer holder has written: stop
		} else if err != nil {
			return err
		}
		// The holder check inside the caller's own transaction.
		resp, err := c.Txn(ctx).
			If(es.Compare(l)).
			Then(clientv3.OpPut("app/reports/status", "done")).
			Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return lease.ErrNotHeld // the lease ended; nothing was written
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	v, f, err := es.FencedGet(ctx, "reports/latest")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v, f > 0)
}
