package bench

import (
	"strconv"
	"testing"
)

// BenchmarkRedisSession measures load+idle-refresh cycles per second on one
// Redis for each of SessionContenders at 1 and 50 workers.
//
//	go test -run '^$' -bench RedisSession
func BenchmarkRedisSession(b *testing.B) {
	for _, c := range SessionContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.SessionCycle(b, c, w) })
			}
		})
	}
}
