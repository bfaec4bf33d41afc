package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/redisstore"
)

// ReplicaEnv names a Redis primary (host:port) with replicas to use for
// the replica suites instead of starting a primary and a replica.
const ReplicaEnv = "TENURE_BENCH_REDIS_REPLICATED"

// The replica suites measure what confirming writes with a replica costs:
// a primary with one replica, both started by the benchmark on this
// machine (replication over loopback), so a confirmation is one more
// round trip to the replica on the same host.
//
//   - redis-replica: the fenced lease cycle of the redis suite (Acquire,
//     which grants a fence, then Release). tenure and tenure-goredis use
//     the default options, so each write is sent with WAIT 1 on its
//     connection and reported done once the replica confirmed it;
//     tenure-off and tenure-goredis-off set Replication.Off (one EVALSHA
//     per write, as on a server without replicas).
//   - redis-replica-gcra: one GCRA decision. tenure uses the default
//     options, under which rate limit decisions are not waited for;
//     tenure-confirmed sets Replication.RateLimits, so every decision is
//     confirmed like a lease write.
var (
	ReplicaLeaseContenders = []string{"tenure", "tenure-off", "tenure-goredis", "tenure-goredis-off"}
	ReplicaGCRAContenders  = []string{"tenure", "tenure-confirmed"}
)

func init() {
	for _, s := range []struct {
		name string
		cs   []string
	}{{"redis-replica", ReplicaLeaseContenders}, {"redis-replica-gcra", ReplicaGCRAContenders}} {
		registerSuite(s.name, suiteFuncs{
			contenders: s.cs,
			cycle: func(e *Env, b *testing.B, contender string, workers int) {
				nw, r, err := e.replicaCycle(s.name, contender)
				if errors.Is(err, ErrSkipped) {
					b.Skip(err)
				}
				if err != nil {
					b.Fatal(err)
				}
				runCycles(b, s.name+":"+contender, workers, nw, r.cpu)
			},
			prepare: func(e *Env, contender string) error {
				_, _, err := e.replicaCycle(s.name, contender)
				return err
			},
			server: func(e *Env) string {
				r, err := e.replicated()
				if err != nil {
					return err.Error()
				}
				return r.describe
			},
		})
	}
}

// replicaEnvs holds each Env's replicated Redis (*Env -> *replicaEnv).
var replicaEnvs sync.Map

type replicaEnv struct {
	once     sync.Once
	clients  *redisClients
	cycles   map[string]newWorker // suite/contender -> cycle
	describe string
	err      error
}

// replicated returns the primary's clients and the replica suites'
// cycles, starting a primary and its replica on first use.
func (e *Env) replicated() (*replicaEnv, error) {
	v, _ := replicaEnvs.LoadOrStore(e, &replicaEnv{})
	re := v.(*replicaEnv)
	re.once.Do(func() { re.err = e.buildReplicated(re) })
	return re, re.err
}

func (e *Env) buildReplicated(re *replicaEnv) error {
	addr := os.Getenv(ReplicaEnv)
	if addr == "" {
		err := e.tb.run(func(t testing.TB) {
			primary := testenv.Redis(t, nil)
			testenv.RedisReplica(t, primary)
			addr = primary.Addr()
		})
		if err != nil {
			return fmt.Errorf("start redis-server and its replica: %w", err)
		}
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		return fmt.Errorf("rueidis client for %s: %w", addr, err)
	}
	e.tb.Cleanup(rc.Close)
	gc := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: MaxWorkers, MaxRetries: -1, ContextTimeoutEnabled: true})
	e.tb.Cleanup(func() { gc.Close() })
	re.clients = &redisClients{addr: addr, rueidis: rc, goredis: gc}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	off := &redisstore.Options{Replication: redisstore.Replication{Off: true}}
	stores := map[string]*redisstore.Store{}
	for name, mk := range map[string]func() (*redisstore.Store, error){
		"tenure":             func() (*redisstore.Store, error) { return redisstore.New(rc, nil) },
		"tenure-off":         func() (*redisstore.Store, error) { return redisstore.New(rc, off) },
		"tenure-goredis":     func() (*redisstore.Store, error) { return redisstore.NewGoRedis(gc, nil) },
		"tenure-goredis-off": func() (*redisstore.Store, error) { return redisstore.NewGoRedis(gc, off) },
		"tenure-confirmed": func() (*redisstore.Store, error) {
			return redisstore.New(rc, &redisstore.Options{Replication: redisstore.Replication{RateLimits: true}})
		},
	} {
		st, err := mk()
		if err != nil {
			return err
		}
		if err := st.Check(ctx); err != nil {
			return fmt.Errorf("redisstore check (%s): %w", name, err)
		}
		stores[name] = st
	}
	rs, err := stores["tenure"].Replicas(ctx)
	if err != nil {
		return err
	}
	if len(rs) != 1 || rs[0].Online < 1 || rs[0].Command == "" {
		return fmt.Errorf("bench: the primary at %s has no replica to confirm writes (%+v)", addr, rs)
	}
	version := "?"
	if info, err := rc.Do(ctx, rc.B().Info().Section("server").Build()).ToString(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				version = strings.TrimSpace(v)
			}
		}
	}
	re.describe = fmt.Sprintf("Redis %s on %s with %d replica(s) online; writes confirmed with %s %d", version, addr, rs[0].Online, rs[0].Command, rs[0].Required)

	re.cycles = map[string]newWorker{}
	for _, c := range ReplicaLeaseContenders {
		ls := stores[c].Leases()
		re.cycles["redis-replica/"+c] = func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				if _, err := ls.Acquire(ctx, key, tok, TTL); err != nil {
					return err
				}
				return ls.Release(ctx, key, tok)
			}
		}
	}
	for _, c := range ReplicaGCRAContenders {
		lim, err := ratelimit.New(stores[c].Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "gcra-" + c, Rate: benchRate, Period: time.Second}, nil)
		if err != nil {
			return err
		}
		re.cycles["redis-replica-gcra/"+c] = func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				d, err := lim.Allow(ctx, key)
				if err == nil && !d.Allowed {
					err = errors.New("bench: a decision under a high limit was refused")
				}
				return err
			}
		}
	}
	return nil
}

// replicaCycle returns the cycle of contender in a replica suite.
func (e *Env) replicaCycle(suite, contender string) (newWorker, *redisClients, error) {
	re, err := e.replicated()
	if err != nil {
		return nil, nil, err
	}
	nw, ok := re.cycles[suite+"/"+contender]
	if !ok {
		return nil, nil, fmt.Errorf("bench: unknown %s contender %q", suite, contender)
	}
	return nw, re.clients, nil
}
