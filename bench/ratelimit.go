package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// The rate limit suites measure decisions per second: one cycle is one
// decision (allowed or not) for a key. Each worker cycles through
// KeysPerWorker keys of its own.
//
//   - ratelimit-gcra, on one Redis: tenure's GCRA (redisstore through
//     rueidis, Limiter.Allow: one EVALSHA that reads TIME, GETs the state,
//     SETs it with PXAT), the same through go-redis (tenure-goredis, on the
//     client redis_rate uses), against go-redis/redis_rate v10 (GCRA script through
//     go-redis: EVALSHA, TIME, GET, SET EX).
//   - ratelimit-fixed, on one Redis: tenure's fixed window against
//     ulule/limiter v3 with its go-redis store (INCRBY, PEXPIRE on the first
//     hit, PTTL; the window is judged with the client's clock).
//   - ratelimit-mem, in process: tenure's GCRA on memstore (validation,
//     map lookup, the reference engine under the store's mutex) against
//     golang.org/x/time/rate, keyed the usual way (a map of *rate.Limiter
//     under a mutex) and as one shared limiter (no key at all).
//
// The limits are high (a million per second), so that every decision is an
// admission that writes; the peers get the same limits.
var (
	RateGCRAContenders  = []string{"tenure", "tenure-goredis", "redis_rate"}
	RateFixedContenders = []string{"tenure", "ulule"}
	RateMemContenders   = []string{"tenure", "x-time-rate", "x-time-rate-single"}
)

const benchRate = 1_000_000

// rateEnvs holds each Env's rate limit contenders (*Env -> *rateEnv).
var rateEnvs sync.Map

type rateEnv struct {
	once sync.Once
	cs   map[string]cycleFunc // suite/contender -> one decision
	err  error
}

func (e *Env) rateContenders() (map[string]cycleFunc, error) {
	v, _ := rateEnvs.LoadOrStore(e, &rateEnv{})
	re := v.(*rateEnv)
	re.once.Do(func() { re.cs, re.err = e.buildRateContenders() })
	return re.cs, re.err
}

func (e *Env) buildRateContenders() (map[string]cycleFunc, error) {
	cs := map[string]cycleFunc{}

	// In process.
	mem, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	tm, err := ratelimit.New(mem.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "bench", Rate: benchRate, Period: time.Second}, nil)
	if err != nil {
		return nil, err
	}
	cs["ratelimit-mem/tenure"] = func(ctx context.Context, key string) error {
		_, err := tm.Allow(ctx, key)
		return err
	}
	var (
		mu    sync.Mutex
		keyed = map[string]*rate.Limiter{}
	)
	cs["ratelimit-mem/x-time-rate"] = func(_ context.Context, key string) error {
		mu.Lock()
		l := keyed[key]
		if l == nil {
			l = rate.NewLimiter(benchRate, benchRate)
			keyed[key] = l
		}
		mu.Unlock()
		l.Allow()
		return nil
	}
	single := rate.NewLimiter(benchRate, benchRate)
	cs["ratelimit-mem/x-time-rate-single"] = func(context.Context, string) error {
		single.Allow()
		return nil
	}

	// On Redis.
	r, err := e.Redis()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	st, err := redisstore.New(r.rueidis, &redisstore.Options{Prefix: "bench:tenure-rl:"})
	if err != nil {
		return nil, err
	}
	if err := st.Check(ctx); err != nil {
		return nil, fmt.Errorf("redisstore check: %w", err)
	}
	tg, err := ratelimit.New(st.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "gcra", Rate: benchRate, Period: time.Second}, nil)
	if err != nil {
		return nil, err
	}
	tf, err := ratelimit.New(st.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "fixed", Rate: benchRate, Period: time.Second}, nil)
	if err != nil {
		return nil, err
	}
	// Warm the scripts (SCRIPT LOAD happens on the first call otherwise).
	if _, err := tg.Allow(ctx, "warm"); err != nil {
		return nil, err
	}
	if _, err := tf.Allow(ctx, "warm"); err != nil {
		return nil, err
	}
	gst, err := redisstore.NewGoRedis(r.goredis, &redisstore.Options{Prefix: "bench:tenure-rl-go:"})
	if err != nil {
		return nil, err
	}
	if err := gst.Check(ctx); err != nil {
		return nil, fmt.Errorf("redisstore (go-redis) check: %w", err)
	}
	tgg, err := ratelimit.New(gst.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "gcra", Rate: benchRate, Period: time.Second}, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tgg.Allow(ctx, "warm"); err != nil {
		return nil, err
	}
	cs["ratelimit-gcra/tenure-goredis"] = func(ctx context.Context, key string) error {
		_, err := tgg.Allow(ctx, key)
		return err
	}
	cs["ratelimit-gcra/tenure"] = func(ctx context.Context, key string) error {
		_, err := tg.Allow(ctx, key)
		return err
	}
	cs["ratelimit-fixed/tenure"] = func(ctx context.Context, key string) error {
		_, err := tf.Allow(ctx, key)
		return err
	}
	rr := redis_rate.NewLimiter(r.goredis)
	rrLimit := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: time.Second}
	if _, err := rr.Allow(ctx, "bench:redis_rate:warm", rrLimit); err != nil {
		return nil, fmt.Errorf("redis_rate: %w", err)
	}
	cs["ratelimit-gcra/redis_rate"] = func(ctx context.Context, key string) error {
		_, err := rr.Allow(ctx, key, rrLimit)
		return err
	}
	us, err := ululeredis.NewStoreWithOptions(r.goredis, limiter.StoreOptions{Prefix: "bench_ulule", MaxRetry: 3})
	if err != nil {
		return nil, fmt.Errorf("ulule store: %w", err)
	}
	ul := limiter.New(us, limiter.Rate{Period: time.Second, Limit: benchRate})
	if _, err := ul.Get(ctx, "warm"); err != nil {
		return nil, fmt.Errorf("ulule: %w", err)
	}
	cs["ratelimit-fixed/ulule"] = func(ctx context.Context, key string) error {
		_, err := ul.Get(ctx, key)
		return err
	}
	return cs, nil
}

// rateCycle returns the cycle of contender in a rate limit suite.
func (e *Env) rateCycle(suite, contender string) (newWorker, error) {
	cs, err := e.rateContenders()
	if err != nil {
		return nil, err
	}
	c, ok := cs[suite+"/"+contender]
	if !ok {
		return nil, fmt.Errorf("bench: unknown contender %q of suite %q", contender, suite)
	}
	return func(int) cycleFunc { return c }, nil
}

// RateCycle measures decisions per second of contender in a rate limit
// suite with workers concurrent workers. It skips b when redis-server is
// not installed.
func (e *Env) RateCycle(b *testing.B, suite, contender string, workers int) {
	nw, err := e.rateCycle(suite, contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	var serverCPU func(context.Context) (time.Duration, error)
	if suite != "ratelimit-mem" {
		r, _ := e.Redis()
		serverCPU = r.cpu
	}
	runCycles(b, suite+":"+contender, workers, nw, serverCPU)
}
