package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

var idemSuites = []string{IdemRedisFirst, IdemRedisReplay, IdemPGFirst, IdemPGReplay}

// BenchmarkIdempotency measures Do per second (and allocations, store
// calls per Do) for a first execution and a replay on Redis and
// PostgreSQL, against the raw baseline and the bare handler, at 1 and 50
// workers.
//
//	go test -run '^$' -bench Idempotency -benchmem
func BenchmarkIdempotency(b *testing.B) {
	for _, s := range idemSuites {
		b.Run(s, func(b *testing.B) {
			for _, c := range IdemContenders {
				b.Run(c, func(b *testing.B) {
					for _, w := range Workers {
						b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.IdemCycle(b, s, c, w) })
					}
				})
			}
		})
	}
}

// TestIdemCycles runs a few calls of every contender of every suite.
func TestIdemCycles(t *testing.T) {
	ctx := context.Background()
	for _, s := range idemSuites {
		for _, c := range IdemContenders {
			t.Run(s+"/"+c, func(t *testing.T) {
				nw, err := env.idemCycle(s, c)
				skipOrFatal(t, err)
				call := nw(0)
				for range 3 {
					if err := call(ctx, "unused"); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// statementCounter is a pgx tracer that counts statements.
type statementCounter struct{ n int }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n++
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestIdempotencyRoundTrips checks the round trips the figures assume: a
// first execution is 2 statements (PostgreSQL) or 2 script calls (Redis),
// a replay 1.
func TestIdempotencyRoundTrips(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) { return receipt, nil }
	t.Run("postgres", func(t *testing.T) {
		p, err := env.Postgres()
		skipOrFatal(t, err)
		cfg, err := pgxpool.ParseConfig(p.dsn)
		if err != nil {
			t.Fatal(err)
		}
		tr := &statementCounter{}
		cfg.ConnConfig.Tracer = tr
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		st, err := pgstore.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		k, err := idempotency.New(st.Idempotency(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req := idemReq("rt-" + env.idem().uniqueKey())
		for i, want := range []int{2, 1} {
			before := tr.n
			if _, err := k.Do(ctx, req, fn); err != nil {
				t.Fatal(err)
			}
			if got := tr.n - before; got != want {
				t.Fatalf("call %d sent %d statements, want %d", i, got, want)
			}
		}
	})
	t.Run("redis", func(t *testing.T) {
		r, err := env.Redis()
		skipOrFatal(t, err)
		st, err := redisstore.New(r.rueidis, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Check(ctx); err != nil {
			t.Fatal(err)
		}
		calls := func() int {
			info, err := r.rueidis.Do(ctx, r.rueidis.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for line := range strings.Lines(info) {
				for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
					if rest, ok := strings.CutPrefix(line, cmd); ok {
						v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
						c, _ := strconv.Atoi(v)
						n += c
					}
				}
			}
			return n
		}
		k, err := idempotency.New(st.Idempotency(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req := idemReq("rt-" + env.idem().uniqueKey())
		for i, want := range []int{2, 1} {
			before := calls()
			if _, err := k.Do(ctx, req, fn); err != nil {
				t.Fatal(err)
			}
			if got := calls() - before; got != want {
				t.Fatalf("call %d ran %d scripts, want %d", i, got, want)
			}
		}
	})
}
