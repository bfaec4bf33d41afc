package pgstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
)

// BenchmarkAcquireRelease compares the Store's acquire+release cycle with
// the same two statements sent through pgx directly, on one pool.
//
//	go test -run '^$' -bench AcquireRelease ./store/pgstore/
func BenchmarkAcquireRelease(b *testing.B) {
	srv := testenv.SharedPostgres(b)
	pool, err := pgxpool.New(context.Background(), srv.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s, err := New(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	tok := lease.NewToken()
	const ttl = 10 * time.Second
	ls := s.Leases()
	b.Run("tenure", func(b *testing.B) {
		for b.Loop() {
			if _, err := ls.Acquire(ctx, "bench", tok, ttl); err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx, "bench", tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			var f int64
			if err := pool.QueryRow(ctx, s.q.acquire, "bench", tok, int64(ttl/time.Microsecond), "").Scan(&f); err != nil {
				b.Fatal(err)
			}
			var waiters bool
			if err := pool.QueryRow(ctx, s.q.release, "bench", tok).Scan(&waiters); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A new key each time: the grant inserts the row.
	b.Run("tenure-newkeys", func(b *testing.B) {
		run, i := time.Now().UnixNano(), 0
		for b.Loop() {
			i++
			key := fmt.Sprintf("bench-k-%d-%d", run, i)
			if _, err := ls.Acquire(ctx, key, tok, ttl); err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx, key, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tenure-parallel", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("bench-p-%d", n.Add(1))
			for pb.Next() {
				if _, err := ls.Acquire(ctx, key, tok, ttl); err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx, key, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
