package bench

import (
	"context"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
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
