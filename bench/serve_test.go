package bench

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// serveSuites are the suites of serve.go.
var serveSuites = []string{"serve-redis-lease", "serve-redis-rate", "serve-sqlite-lease", "serve-sqlite-rate"}

// BenchmarkServe measures each serve suite's contenders (through tenure
// serve, and the library directly on the same store) at 1 and 50 workers.
//
//	go test -run '^$' -bench Serve
func BenchmarkServe(b *testing.B) {
	for _, suite := range serveSuites {
		b.Run(suite, func(b *testing.B) {
			for _, c := range Contenders(suite) {
				b.Run(c, func(b *testing.B) {
					for _, w := range Workers {
						b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.Cycle(b, suite, c, w) })
					}
				})
			}
		})
	}
}

// TestServeCycles runs a few cycles of every serve contender and checks
// that both paths reach the same store: a lease taken through serve is
// held for the direct view, and the other way round.
func TestServeCycles(t *testing.T) {
	ctx := context.Background()
	for _, suite := range serveSuites {
		for _, c := range Contenders(suite) {
			t.Run(suite+"/"+c, func(t *testing.T) {
				store, op := serveParts(suite)
				tc, err := env.serveCycle(store, op, c)
				skipOrFatal(t, err)
				calls := 0
				for i := range 3 {
					key := "test:" + suite + ":" + c + ":" + strconv.Itoa(i)
					if err := tc(ctx, key, func(time.Duration) { calls++ }); err != nil {
						t.Fatal(err)
					}
				}
				want := 3
				if op == "lease" {
					want = 6
				}
				if calls != want {
					t.Fatalf("%d latencies recorded, want %d", calls, want)
				}
			})
		}
	}
	for _, store := range []string{"redis", "sqlite"} {
		t.Run(store+"/same-store", func(t *testing.T) {
			s, err := env.serveStore(store)
			skipOrFatal(t, err)
			key := "test:serve:" + store + ":shared"
			tok := "token-" + store + "-0123456789"
			if _, err := s.leasesServe.Acquire(ctx, key, tok, TTL); err != nil {
				t.Fatal(err)
			}
			info, err := s.leases.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Held {
				t.Fatalf("a lease acquired through serve is not held on the store: %+v", info)
			}
			if err := s.leases.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
			info, err = s.leasesServe.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Held {
				t.Fatalf("a lease released on the store is still held through serve: %+v", info)
			}
		})
	}
}
