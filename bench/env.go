// Package bench measures tenure's lease cycle (acquire a key, release it)
// against peer libraries and raw commands, on the same server in the same
// process: on Redis against bsm/redislock, go-redsync/redsync and a plain
// SET NX PX + DEL, on PostgreSQL against the store's own statements sent
// through pgx.
//
// The benchmarks live in lease_test.go; cmd/ratios runs them in alternating
// rounds and prints the medians and ratios. See README.md.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/redisstore"
)

// Environment variables naming servers to use instead of starting
// throwaway ones: a Redis address (host:port) and a PostgreSQL DSN.
const (
	RedisEnv    = "TENURE_BENCH_REDIS"
	PostgresEnv = "TENURE_BENCH_POSTGRES"
)

// MaxWorkers is the largest worker count the clients are sized for: the
// go-redis pool and the pgx pool have this many connections, so no worker
// ever waits for a connection on the client side.
const MaxWorkers = 50

// Workers are the worker counts measured.
var Workers = []int{1, MaxWorkers}

// TTL is the lease time of every acquisition.
const TTL = 10 * time.Second

// KeysPerWorker is the number of distinct keys each worker cycles through.
const KeysPerWorker = 1000

// ErrSkipped reports a server that cannot be started because its binary is
// not installed (and TENURE_TEST_REQUIRE is not 1).
var ErrSkipped = errors.New("bench: server not available")

// Env holds the servers and clients shared by all benchmarks of a process.
// Servers are started on first use (unless named by RedisEnv or
// PostgresEnv) and stopped by Close.
type Env struct {
	tb *procTB

	redisOnce sync.Once
	redis     *redisClients
	redisErr  error

	redisContOnce sync.Once
	redisCont     *redisContenders
	redisContErr  error

	pgOnce sync.Once
	pg     *pgClients
	pgErr  error

	pgContOnce sync.Once
	pgCont     *pgContenders
	pgContErr  error
}

// NewEnv returns an Env that has not started anything yet.
func NewEnv() *Env { return &Env{tb: &procTB{name: "bench"}} }

// Close closes the clients and stops the servers the Env started.
func (e *Env) Close() {
	e.tb.runCleanups()
}

type redisClients struct {
	addr    string
	rueidis rueidis.Client // tenure's client: auto-pipelining, as shipped
	goredis *goredis.Client
}

type pgClients struct {
	dsn        string
	pool       *pgxpool.Pool
	postmaster int // pid, when the server runs on this machine
}

// Redis returns the Redis clients, starting a server on first use.
func (e *Env) Redis() (*redisClients, error) {
	e.redisOnce.Do(func() { e.redis, e.redisErr = e.startRedis() })
	return e.redis, e.redisErr
}

// Postgres returns the PostgreSQL pool, starting a server on first use.
func (e *Env) Postgres() (*pgClients, error) {
	e.pgOnce.Do(func() { e.pg, e.pgErr = e.startPostgres() })
	return e.pg, e.pgErr
}

func (e *Env) startRedis() (*redisClients, error) {
	addr := os.Getenv(RedisEnv)
	if addr == "" {
		err := e.tb.run(func(t testing.TB) { addr = testenv.Redis(t, nil).Addr() })
		if err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableRetry: true, // as redisstore's documentation asks
	})
	if err != nil {
		return nil, fmt.Errorf("rueidis client for %s: %w", addr, err)
	}
	e.tb.Cleanup(rc.Close)
	gc := goredis.NewClient(&goredis.Options{
		Addr:     addr,
		PoolSize: MaxWorkers,
	})
	e.tb.Cleanup(func() { gc.Close() })
	// Open every connection now, not in the first measured run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, MaxWorkers)
	for i := range MaxWorkers {
		wg.Go(func() { errs[i] = gc.Ping(ctx).Err() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("go-redis client for %s: %w", addr, err)
	}
	if err := rc.Do(ctx, rc.B().Ping().Build()).Error(); err != nil {
		return nil, fmt.Errorf("rueidis client for %s: %w", addr, err)
	}
	return &redisClients{addr: addr, rueidis: rc, goredis: gc}, nil
}

func (e *Env) startPostgres() (*pgClients, error) {
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		err := e.tb.run(func(t testing.TB) {
			srv := testenv.Postgres(t)
			dsn = srv.NewDatabase(t)
		})
		if err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	cfg.MaxConns = MaxWorkers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgx pool: %w", err)
	}
	e.tb.Cleanup(pool.Close)
	// Open every connection now, not in the first measured run.
	conns := make([]*pgxpool.Conn, 0, MaxWorkers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, MaxWorkers)
	for i := range MaxWorkers {
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, c := range conns {
		c.Release()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return &pgClients{dsn: dsn, pool: pool, postmaster: (&pgClients{pool: pool}).postmasterPID(ctx)}, nil
}

// procTB lets the benchmarks and cmd/ratios start servers with
// internal/testenv outside of a test: its cleanups last until Close, and a
// failure or skip ends the function given to run with an error. Only the
// methods testenv calls are implemented; the embedded TB is nil.
type procTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
	msgs     []string
}

// run calls f in a goroutine of its own (Fatalf and Skipf end it) and
// reports whether it failed or skipped.
func (t *procTB) run(f func(t testing.TB)) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(t)
	}()
	<-done
	t.mu.Lock()
	defer t.mu.Unlock()
	msg := strings.Join(t.msgs, "\n")
	t.msgs = nil
	switch {
	case t.failed:
		t.failed = false
		return errors.New(msg)
	case t.skipped:
		t.skipped = false
		return fmt.Errorf("%w: %s", ErrSkipped, msg)
	}
	return nil
}

func (t *procTB) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.msgs {
		fmt.Fprintln(os.Stderr, m)
	}
	t.msgs = nil
}

func (t *procTB) Helper()      {}
func (t *procTB) Name() string { return t.name }

func (t *procTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *procTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *procTB) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.msgs = append(t.msgs, fmt.Sprintf(format, args...))
}

func (t *procTB) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *procTB) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

func (t *procTB) Skipf(format string, args ...any) {
	t.Logf(format, args...)
	t.mu.Lock()
	t.skipped = true
	t.mu.Unlock()
	runtime.Goexit()
}

// Suites are the benchmark suites: the stores measured.
var Suites = []string{"redis", "postgres", "redis-session", "ratelimit-gcra", "ratelimit-fixed", "ratelimit-mem"}

// suiteFuncs is a suite that a file of its own registers with
// registerSuite, instead of adding cases to the switches below.
type suiteFuncs struct {
	contenders []string
	cycle      func(e *Env, b *testing.B, contender string, workers int)
	prepare    func(e *Env, contender string) error
	server     func(e *Env) string
}

// registeredSuites are the suites added by registerSuite.
var registeredSuites = map[string]suiteFuncs{}

// registerSuite adds a suite (from an init function).
func registerSuite(name string, s suiteFuncs) {
	Suites = append(Suites, name)
	registeredSuites[name] = s
}

// Contenders returns the contenders of suite.
func Contenders(suite string) []string {
	if s, ok := registeredSuites[suite]; ok {
		return s.contenders
	}
	switch suite {
	case "redis":
		return RedisContenders
	case "postgres":
		return PostgresContenders
	case "redis-session":
		return SessionContenders
	case "ratelimit-gcra":
		return RateGCRAContenders
	case "ratelimit-fixed":
		return RateFixedContenders
	case "ratelimit-mem":
		return RateMemContenders
	}
	return nil
}

// Cycle runs the benchmark of contender in suite with workers workers.
func (e *Env) Cycle(b *testing.B, suite, contender string, workers int) {
	if s, ok := registeredSuites[suite]; ok {
		s.cycle(e, b, contender, workers)
		return
	}
	switch suite {
	case "redis":
		e.RedisCycle(b, contender, workers)
	case "postgres":
		e.PostgresCycle(b, contender, workers)
	case "redis-session":
		e.SessionCycle(b, contender, workers)
	case "ratelimit-gcra", "ratelimit-fixed", "ratelimit-mem":
		e.RateCycle(b, suite, contender, workers)
	default:
		b.Fatalf("bench: unknown suite %q", suite)
	}
}

// Prepare starts the server of suite and sets up every contender, so that
// a failure is reported here rather than as an empty benchmark result.
func (e *Env) Prepare(suite string) error {
	if s, ok := registeredSuites[suite]; ok {
		for _, c := range s.contenders {
			if err := s.prepare(e, c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range Contenders(suite) {
		var err error
		switch suite {
		case "redis":
			_, err = e.redisCycle(c)
		case "postgres":
			_, err = e.postgresCycle(c)
		case "redis-session":
			_, err = e.sessionCycle(c)
		case "ratelimit-gcra", "ratelimit-fixed", "ratelimit-mem":
			_, err = e.rateCycle(suite, c)
		default:
			err = fmt.Errorf("bench: unknown suite %q", suite)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Server describes the server of a prepared suite: its version and, for
// Redis, how redisstore releases.
func (e *Env) Server(suite string) string {
	if s, ok := registeredSuites[suite]; ok {
		return s.server(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch suite {
	case "ratelimit-mem":
		return "in process (memstore; golang.org/x/time/rate)"
	case "redis", "redis-session", "ratelimit-gcra", "ratelimit-fixed":
		r, err := e.Redis()
		if err != nil {
			return err.Error()
		}
		info, err := r.rueidis.Do(ctx, r.rueidis.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return err.Error()
		}
		version := "?"
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				version = strings.TrimSpace(v)
			}
		}
		path := ""
		st, err := redisstore.New(r.rueidis, nil)
		if err == nil {
			path, err = st.ReleasePath(ctx)
		}
		if err != nil {
			path = err.Error()
		}
		return fmt.Sprintf("Redis %s on %s (redisstore release path: %s)", version, r.addr, path)
	case "postgres":
		p, err := e.Postgres()
		if err != nil {
			return err.Error()
		}
		var version string
		if err := p.pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
			return err.Error()
		}
		var fsync, syncCommit string
		_ = p.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit)
		return fmt.Sprintf("PostgreSQL %s (fsync %s, synchronous_commit %s)", version, fsync, syncCommit)
	}
	return "unknown suite " + suite
}
