package bench

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkRateLimit measures decisions per second of every rate limit
// suite's contenders at 1 and 50 workers.
//
//	go test -run '^$' -bench RateLimit
func BenchmarkRateLimit(b *testing.B) {
	for _, suite := range []string{"ratelimit-gcra", "ratelimit-fixed", "ratelimit-mem"} {
		b.Run(suite, func(b *testing.B) {
			for _, c := range Contenders(suite) {
				b.Run(c, func(b *testing.B) {
					for _, w := range Workers {
						b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.RateCycle(b, suite, c, w) })
					}
				})
			}
		})
	}
}

// TestRateLimitCycles runs a few decisions of every contender.
func TestRateLimitCycles(t *testing.T) {
	for _, suite := range []string{"ratelimit-gcra", "ratelimit-fixed", "ratelimit-mem"} {
		for _, c := range Contenders(suite) {
			t.Run(suite+"/"+c, func(t *testing.T) {
				nw, err := env.rateCycle(suite, c)
				skipOrFatal(t, err)
				cycle := nw(0)
				for i := range 3 {
					if err := cycle(context.Background(), "test:"+suite+":"+c+":"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
