package bench

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkEtcdCycle measures the lease cycle of every etcd contender at 1
// and 50 workers.
//
//	go test -run '^$' -bench EtcdCycle
func BenchmarkEtcdCycle(b *testing.B) {
	for _, c := range EtcdContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.EtcdCycle(b, c, w) })
			}
		})
	}
}

// TestEtcdCycles runs a few cycles of every contender, and checks that
// each cycle leaves its key free.
func TestEtcdCycles(t *testing.T) {
	for _, c := range EtcdContenders {
		t.Run(c, func(t *testing.T) {
			nw, err := env.etcdCycle(c)
			skipOrFatal(t, err)
			cycle := nw(0)
			for i := range 3 {
				key := "test:etcd:" + c + ":" + strconv.Itoa(i%2)
				if err := cycle(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
