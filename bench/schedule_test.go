package bench

import (
	"strconv"
	"testing"
)

// BenchmarkSchedule measures fenced slot completions per second on
// PostgreSQL and Redis for each of SchedContenders at 1 and 50 workers.
//
//	go test -run '^$' -bench Schedule
func BenchmarkSchedule(b *testing.B) {
	for _, suite := range []string{SchedPG, SchedRedis} {
		b.Run(suite, func(b *testing.B) {
			for _, c := range SchedContendersOf(suite) {
				b.Run(c, func(b *testing.B) {
					for _, w := range Workers {
						b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.SchedCycle(b, suite, c, w) })
					}
				})
			}
		})
	}
}
