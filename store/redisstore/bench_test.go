package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
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
