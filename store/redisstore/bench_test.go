package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
)

// BenchmarkAcquireRelease measures acquire+release cycles with 1 and 50
// concurrent workers, each on a key of its own (the shape bench/ compares
// with bsm/redislock and go-redsync), on a default rueidis client.
func BenchmarkAcquireRelease(b *testing.B) {
	s := checked(b, newClient(b, testenv.SharedRedis(b).Addr()), nil)
	ls := s.Leases()
	ctx := context.Background()
	b.Run("workers=1", func(b *testing.B) {
		b.ReportAllocs()
		k, tok := "bench/1", lease.NewToken()
		for b.Loop() {
			if _, err := ls.Acquire(ctx, k, tok, 10*time.Second); err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx, k, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("workers=50", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism((50 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			k, tok := "bench/50/"+strconv.FormatInt(next.Add(1), 10), lease.NewToken()
			for pb.Next() {
				if _, err := ls.Acquire(ctx, k, tok, 10*time.Second); err != nil {
					b.Error(err)
					return
				}
				if err := ls.Release(ctx, k, tok); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkLeaseMemory measures what a server keeps per lease: the keys
// and bytes (INFO memory used_memory, and the sum of MEMORY USAGE of the
// store's keys) of 30,000 distinct keys while held, and after they were
// released and their TTLs passed. It runs once whatever b.N (use
// -benchtime 1x) on a server of its own.
func BenchmarkLeaseMemory(b *testing.B) {
	const n, ttl = 30000, 30 * time.Second
	srv := testenv.Redis(b, nil)
	c := newClient(b, srv.Addr())
	s := checked(b, c, nil)
	ls := s.Leases()
	ctx := context.Background()
	usage := func() (keys, used, sum int64) {
		b.Helper()
		keys = dbsize(b, c)
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				used, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		var cursor uint64
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("tenure:*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range e.Elements {
				m, err := c.Do(ctx, c.B().MemoryUsage().Key(k).Build()).AsInt64()
				if err == nil {
					sum += m
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				return keys, used, sum
			}
		}
	}
	each := func(fn func(k, tok string) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1); i <= n; i = next.Add(1) {
					if err := fn("memory/"+strconv.FormatInt(i, 10), strconv.FormatInt(i, 10)+"-"+strings.Repeat("t", 20)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	k0, u0, _ := usage()
	each(func(k, tok string) error { _, err := ls.Acquire(ctx, k, tok, ttl); return err })
	k1, u1, s1 := usage()
	each(func(k, tok string) error { return ls.Release(ctx, k, tok) })
	// Wait until the server expired every key that has a TTL, or the
	// leases' TTL passed (the keys kept longer are what an ended lease
	// leaves).
	for deadline := time.Now().Add(ttl + 5*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		info, err := c.Do(ctx, c.B().Info().Section("keyspace").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(info, "expires=") || strings.Contains(info, "expires=0,") {
			break
		}
	}
	k2, u2, s2 := usage()
	b.ReportMetric(float64(k1-k0)/n, "keys/held")
	b.ReportMetric(float64(u1-u0)/n, "used-B/held")
	b.ReportMetric(float64(s1)/n, "usage-B/held")
	b.ReportMetric(float64(k2-k0), "keys-left")
	b.ReportMetric(float64(u2-u0)/n, "used-B/ended")
	b.ReportMetric(float64(s2)/n, "usage-B/ended")
}
