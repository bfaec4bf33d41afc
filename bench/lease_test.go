package bench

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
)

var env *Env

func TestMain(m *testing.M) {
	env = NewEnv()
	code := m.Run()
	env.Close()
	os.Exit(code)
}

// BenchmarkRedisCycle measures acquire+release cycles per second on one
// Redis for each of RedisContenders at 1 and 50 workers.
//
//	go test -run '^$' -bench RedisCycle
func BenchmarkRedisCycle(b *testing.B) {
	for _, c := range RedisContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.RedisCycle(b, c, w) })
			}
		})
	}
}

// BenchmarkRedisClients measures the same fenced cycle on each way of
// sending it (RedisClientContenders) at 1 and 50 workers.
//
//	go test -run '^$' -bench RedisClients
func BenchmarkRedisClients(b *testing.B) {
	for _, c := range RedisClientContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.Cycle(b, "redis-clients", c, w) })
			}
		})
	}
}

// BenchmarkPostgresCycle measures acquire+release cycles per second on one
// PostgreSQL server for each of PostgresContenders at 1 and 50 workers.
//
//	go test -run '^$' -bench PostgresCycle
func BenchmarkPostgresCycle(b *testing.B) {
	for _, c := range PostgresContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.PostgresCycle(b, c, w) })
			}
		})
	}
}

// TestCycles runs a few cycles of every contender (and, on PostgreSQL,
// checks that the raw baseline runs the store's statements).
func TestCycles(t *testing.T) {
	ctx := context.Background()
	t.Run("redis", func(t *testing.T) {
		for _, c := range RedisContenders {
			t.Run(c, func(t *testing.T) {
				nw, err := env.redisCycle(c)
				skipOrFatal(t, err)
				cycle := nw(0)
				for i := range 3 {
					if err := cycle(ctx, "test:redis:"+c+":"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
	t.Run("postgres", func(t *testing.T) {
		for _, c := range PostgresContenders {
			t.Run(c, func(t *testing.T) {
				nw, err := env.postgresCycle(c)
				skipOrFatal(t, err)
				cycle := nw(0)
				for i := range 3 {
					if err := cycle(ctx, "test:pg:"+c+":"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
}

func skipOrFatal(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrSkipped) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
