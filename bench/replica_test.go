package bench

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkReplica measures the fenced lease cycle and the GCRA decision
// on a primary with one replica, with and without confirmation, at 1 and
// 50 workers.
//
//	go test -run '^$' -bench Replica
func BenchmarkReplica(b *testing.B) {
	for _, suite := range []string{"redis-replica", "redis-replica-gcra"} {
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

// TestReplicaCycles runs a few cycles of every contender of the replica
// suites.
func TestReplicaCycles(t *testing.T) {
	ctx := context.Background()
	for _, suite := range []string{"redis-replica", "redis-replica-gcra"} {
		for _, c := range Contenders(suite) {
			t.Run(suite+"/"+c, func(t *testing.T) {
				nw, _, err := env.replicaCycle(suite, c)
				skipOrFatal(t, err)
				cycle := nw(0)
				for i := range 3 {
					if err := cycle(ctx, "test:"+suite+":"+c+":"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
