package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore"
)

// A lease on Redis, and the fenced write that protects the resource from a
// holder that paused past its lease.
func Example() {
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{"127.0.0.1:6379"}, // or every node of a cluster
		DisableRetry: true,                       // the Locker decides when to send again
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	db, err := redisstore.New(c, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Optional: refuse an evicting server at start-up rather than at the
	// first write.
	if err := db.Check(ctx); err != nil {
		log.Fatal(err)
	}

	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}
	err = locker.Do(ctx, "report:tenant-42", 10*time.Second, func(ctx context.Context, l *lease.Lease) error {
		// ... build the report ...
		return db.FencedSet(ctx, "report:tenant-42", l.Fence(), []byte("report body"))
	})
	switch {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("a newer holder already wrote the report")
	case errors.Is(err, lease.ErrHeld):
		fmt.Println("another instance is building the report")
	case errors.Is(err, redisstore.ErrOutOfMemory):
		fmt.Println("Redis is full: nothing was written")
	case err != nil:
		log.Fatal(err)
	}
}

// The same store on the go-redis client a service already has: same
// scripts, same keys, same guarantees.
func ExampleNewGoRedis() {
	ctx := context.Background()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"}, // several addresses: a cluster client
		MaxRetries:            -1,                         // the Locker decides when to send again
		ContextTimeoutEnabled: true,                       // calls end with their context
	})
	defer rdb.Close()

	db, err := redisstore.NewGoRedis(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lease.New(db.Leases(), nil)
	if err != nil {
		log.Fatal(err)
	}
	l, err := locker.TryAcquire(ctx, "report:tenant-42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	if err := db.HolderSet(ctx, l, "report:tenant-42", []byte("report body")); err != nil {
		log.Fatal(err)
	}
}

// Replica confirmation is on by default: with replicas online, a write is
// reported done only once they confirmed it. These options tune it.
func ExampleReplication() {
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableRetry: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The default: wait for every online replica, up to 1s.
	db, err := redisstore.New(c, nil)
	if err != nil {
		log.Fatal(err)
	}
	st, err := db.Replicas(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range st {
		fmt.Printf("primary %s: %d replicas online, writes confirmed with %q %d\n", p.Addr, p.Online, p.Command, p.Required)
	}

	// At least one replica, even when none is connected (fail closed), a
	// longer wait, and WAIT even where WAITAOF is available.
	strict, err := redisstore.New(c, &redisstore.Options{Replication: redisstore.Replication{
		Replicas: 1,
		Timeout:  2 * time.Second,
		Command:  redisstore.ConfirmWait,
	}})
	if err != nil {
		log.Fatal(err)
	}
	_, err = strict.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
	if errors.Is(err, redisstore.ErrUnconfirmed) {
		fmt.Println("no replica confirmed the grant: it was given back")
	}

	// No confirmation at all: a failover to a lagging replica can then
	// forget writes reported done.
	_, _ = redisstore.New(c, &redisstore.Options{Replication: redisstore.Replication{Off: true}})
}
