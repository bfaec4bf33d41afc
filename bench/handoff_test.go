package bench

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// HandoffWorkers and HandoffHold are the contended hand-off's shape: this
// many workers on one key, each holding it this long.
const (
	HandoffWorkers = 20
	HandoffHold    = 2 * time.Millisecond
)

// BenchmarkHandoffMemory passes one key among 20 workers on a memory
// store, fair (the default) and unfair (lease.Options.Unfair).
//
//	go test -run '^$' -bench HandoffMemory
func BenchmarkHandoffMemory(b *testing.B) {
	for _, c := range []struct {
		name   string
		unfair bool
	}{{"tenure-fair", false}, {"tenure-unfair", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := memstore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			lk, err := lease.New(s.Leases(), &lease.Options{Unfair: c.unfair})
			if err != nil {
				b.Fatal(err)
			}
			runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
				return func(ctx context.Context) (func() error, error) {
					l, err := lk.Acquire(ctx, "bench:handoff", 10*time.Second)
					if err != nil {
						return nil, err
					}
					return func() error { return l.Release(ctx) }, nil
				}
			})
		})
	}
}

// BenchmarkHandoffRedis passes one key among 20 workers on one Redis:
// tenure fair (the default: a queue of waiters, woken by the release's
// publish), tenure unfair, and bsm/redislock retrying every 5ms (its
// linear backoff; it has no wake-up).
//
//	go test -run '^$' -bench HandoffRedis
func BenchmarkHandoffRedis(b *testing.B) {
	r, err := env.Redis()
	if err != nil {
		b.Fatal(err)
	}
	st, err := redisstore.New(r.rueidis, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Check(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		unfair bool
	}{{"tenure-fair", false}, {"tenure-unfair", true}} {
		b.Run(c.name, func(b *testing.B) {
			lk, err := lease.New(st.Leases(), &lease.Options{Unfair: c.unfair})
			if err != nil {
				b.Fatal(err)
			}
			key := "bench:handoff:" + c.name
			runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
				return func(ctx context.Context) (func() error, error) {
					l, err := lk.Acquire(ctx, key, 10*time.Second)
					if err != nil {
						return nil, err
					}
					return func() error { return l.Release(ctx) }, nil
				}
			})
		})
	}
	b.Run("redislock", func(b *testing.B) {
		rl := redislock.New(r.goredis)
		retry := redislock.LinearBackoff(5 * time.Millisecond)
		runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
			return func(ctx context.Context) (func() error, error) {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				l, err := rl.Obtain(wctx, "bench:handoff:redislock", 10*time.Second, &redislock.Options{RetryStrategy: retry})
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}
		})
	})
}
