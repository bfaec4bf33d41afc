package bench

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// PostgresContenders are the contenders of BenchmarkPostgresCycle:
//
//   - tenure: pgstore's lease.Store, Acquire + Release with a fresh token
//     per cycle (one statement each).
//   - tenure-locker: the same store through lease.Locker: TryAcquire +
//     Lease.Release.
//   - raw: the very statements pgstore runs (rawAcquire, rawRelease), with
//     the same arguments, sent through the same pgx pool without the store
//     around them. Before measuring, the store's statements are recorded
//     with a pgx tracer and compared with these, so the baseline cannot
//     drift from the store.
//   - tenure-unlogged: the tenure contender on a second schema
//     ("tenure_unlogged") whose leases table is UNLOGGED
//     (pgstore.Options.UnloggedLeases).
//   - advisory: the session advisory-lock pair PostgreSQL users reach for
//     first: take a connection from the pool, SELECT
//     pg_try_advisory_lock(hashtextextended(key, 0)), then SELECT
//     pg_advisory_unlock(...) on the same connection, and give the
//     connection back. No table and no WAL, but the lock holds the
//     connection and has neither a TTL nor a fence.
var PostgresContenders = []string{"tenure", "tenure-locker", "raw", "tenure-unlogged", "advisory"}

// UnloggedSchema is the schema of the tenure-unlogged contender.
const UnloggedSchema = "tenure_unlogged"

// rawAcquire and rawRelease are pgstore's acquire and release statements
// for the default schema "tenure" (see buildQueries in store/pgstore).
const (
	rawAcquire = `WITH c AS (SELECT clock_timestamp() AS now) INSERT INTO "tenure".leases AS l (key, token, fence, expires_at, holder)
SELECT $1, $2, greatest((extract(epoch FROM c.now) * 1000000)::bigint,
	(SELECT ff.fence FROM "tenure".lease_fence_floor AS ff) + 1, 1),
	c.now + $3::bigint * interval '1 microsecond', nullif($4::text, '') FROM c
ON CONFLICT (key) DO UPDATE SET
	fence = CASE WHEN l.token = excluded.token AND l.expires_at > (SELECT now FROM c) THEN l.fence
		ELSE greatest(l.fence + 1, excluded.fence) END,
	token = excluded.token,
	expires_at = excluded.expires_at,
	holder = excluded.holder
WHERE l.token = excluded.token AND l.expires_at > (SELECT now FROM c)
	OR (l.token IS NULL OR l.expires_at <= (SELECT now FROM c)) AND NOT l.waiters
RETURNING l.fence`
	rawRelease = `WITH c AS (SELECT clock_timestamp() AS now) UPDATE "tenure".leases AS l SET token = NULL, holder = NULL, expires_at = c.now FROM c
WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now RETURNING l.waiters`
)

type pgContenders struct {
	store    lease.Store
	unlogged lease.Store
	locker   *lease.Locker
	pool     *pgxpool.Pool
}

func (p *pgClients) contenders(ctx context.Context) (*pgContenders, error) {
	st, err := pgstore.New(p.pool, nil)
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := checkStatements(ctx, p.dsn); err != nil {
		return nil, err
	}
	ls := st.Leases()
	lk, err := lease.New(ls, nil)
	if err != nil {
		return nil, err
	}
	un, err := pgstore.New(p.pool, &pgstore.Options{Schema: UnloggedSchema, UnloggedLeases: true})
	if err != nil {
		return nil, err
	}
	if err := un.Migrate(ctx); err != nil {
		return nil, err
	}
	return &pgContenders{store: ls, unlogged: un.Leases(), locker: lk, pool: p.pool}, nil
}

// recorder is a pgx tracer that records the statements a connection runs.
type recorder struct {
	mu    sync.Mutex
	stmts []recorded
}

type recorded struct {
	sql  string
	args []string // the Go types of the arguments
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	rec := recorded{sql: d.SQL}
	for _, a := range d.Args {
		rec.args = append(rec.args, reflect.TypeOf(a).String())
	}
	r.mu.Lock()
	r.stmts = append(r.stmts, rec)
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// checkStatements runs one cycle of pgstore on a traced connection and
// verifies that it sends exactly rawAcquire and rawRelease, with arguments
// of the types the raw baseline passes.
func checkStatements(ctx context.Context, dsn string) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	rec := &recorder{}
	cfg.ConnConfig.Tracer = rec
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	ls := st.Leases()
	const key = "bench:postgres:statements"
	tok := lease.NewToken()
	if _, err := ls.Acquire(ctx, key, tok, TTL); err != nil {
		return err
	}
	if err := ls.Release(ctx, key, tok); err != nil {
		return err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []recorded{
		{rawAcquire, []string{"string", "string", "int64", "string"}},
		{rawRelease, []string{"string", "string"}},
	}
	if !reflect.DeepEqual(rec.stmts, want) {
		var got []string
		for _, s := range rec.stmts {
			got = append(got, fmt.Sprintf("%s\n  args %v", s.sql, s.args))
		}
		return fmt.Errorf("bench: pgstore's acquire+release no longer runs the raw baseline's statements; update rawAcquire and rawRelease in bench/postgres.go. pgstore ran:\n%s",
			strings.Join(got, "\n"))
	}
	return nil
}

func (e *Env) postgresCycle(name string) (newWorker, error) {
	p, err := e.Postgres()
	if err != nil {
		return nil, err
	}
	e.pgContOnce.Do(func() { e.pgCont, e.pgContErr = p.contenders(context.Background()) })
	if e.pgContErr != nil {
		return nil, e.pgContErr
	}
	c := e.pgCont
	switch name {
	case "tenure":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				if _, err := c.store.Acquire(ctx, key, tok, TTL); err != nil {
					return err
				}
				return c.store.Release(ctx, key, tok)
			}
		}, nil
	case "tenure-locker":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				l, err := c.locker.TryAcquire(ctx, key, TTL)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}, nil
	case "tenure-unlogged":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				if _, err := c.unlogged.Acquire(ctx, key, tok, TTL); err != nil {
					return err
				}
				return c.unlogged.Release(ctx, key, tok)
			}
		}, nil
	case "advisory":
		pool := c.pool
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				var ok bool
				if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("bench: advisory lock on %q is taken", key)
				}
				if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("bench: advisory unlock of %q found no lock", key)
				}
				return nil
			}
		}, nil
	case "raw":
		pool := c.pool
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				var fence int64
				if err := pool.QueryRow(ctx, rawAcquire, key, tok, TTL.Microseconds(), "").Scan(&fence); err != nil {
					return err
				}
				var waiters bool
				if err := pool.QueryRow(ctx, rawRelease, key, tok).Scan(&waiters); err != nil {
					return fmt.Errorf("bench: raw release: %w", err)
				}
				return nil
			}
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown postgres contender %q", name)
}

// PostgresCycle measures acquire+release cycles of contender on one
// PostgreSQL server with workers concurrent workers. It skips b when
// PostgreSQL is not installed.
func (e *Env) PostgresCycle(b *testing.B, contender string, workers int) {
	nw, err := e.postgresCycle(contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	var cpu func(context.Context) (time.Duration, error)
	if pid := e.pg.postmaster; pid > 0 {
		cpu = func(context.Context) (time.Duration, error) { return postgresCPU(pid) }
	}
	// One key set for all: they run the same statements on the same rows.
	runCycles(b, "pg", workers, nw, cpu)
}
