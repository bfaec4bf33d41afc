package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore"
)

// RedisContenders are the contenders of BenchmarkRedisCycle:
//
//   - tenure: redisstore's lease.Store, Acquire + Release with a fresh
//     token per cycle (one Lua script call each: the acquire script sets
//     the lock and the fence key; the release script compares the token
//     and deletes, or DELEX IFEQ on Redis 8.4+), through rueidis.
//   - tenure-goredis: the same store and cycle through the go-redis client
//     the peers use (redisstore.NewGoRedis): the same scripts, keys and
//     round trips on the other client.
//   - tenure-locker: the rueidis store through lease.Locker: TryAcquire +
//     Lease.Release (adds the Lease's validity timer and bookkeeping).
//   - redislock: bsm/redislock Obtain + Release (Lua SET NX PX script,
//     Lua compare-and-delete) through go-redis.
//   - redsync: go-redsync/redsync with one pool (one Redis),
//     NewMutex(WithTries(1)) + Lock + Unlock (SET NX PX, Lua
//     compare-and-delete) through go-redis.
//   - raw: SET key 1 NX PX ttl + DEL key through go-redis. This is the
//     unsafe baseline the seed documents warn about: DEL removes whoever
//     holds the key, and there is no fence. It is the floor of what one
//     acquire and one release can cost on a go-redis client.
//   - raw-rueidis: the same two commands through tenure's rueidis client,
//     which separates the cost of the client from the cost of tenure's
//     scripts.
var RedisContenders = []string{"tenure", "tenure-goredis", "tenure-locker", "redislock", "redsync", "raw", "raw-rueidis"}

// redisContenders builds the per-worker cycles of every contender.
type redisContenders struct {
	store  lease.Store
	gstore lease.Store // on go-redis
	locker *lease.Locker
	rlock  *redislock.Client
	rsync  *redsync.Redsync
}

func (r *redisClients) contenders(ctx context.Context) (*redisContenders, error) {
	st, err := redisstore.New(r.rueidis, nil)
	if err != nil {
		return nil, err
	}
	// The server check runs once before the first write; run it now so no
	// measured cycle pays for it.
	if err := st.Check(ctx); err != nil {
		return nil, fmt.Errorf("redisstore check: %w", err)
	}
	gst, err := redisstore.NewGoRedis(r.goredis, nil)
	if err != nil {
		return nil, err
	}
	if err := gst.Check(ctx); err != nil {
		return nil, fmt.Errorf("redisstore (go-redis) check: %w", err)
	}
	ls := st.Leases()
	lk, err := lease.New(ls, nil)
	if err != nil {
		return nil, err
	}
	return &redisContenders{
		store:  ls,
		gstore: gst.Leases(),
		locker: lk,
		rlock:  redislock.New(r.goredis),
		rsync:  redsync.New(redsyncgoredis.NewPool(r.goredis)),
	}, nil
}

var errNotAcquired = errors.New("bench: a free key was not acquired")

// redisCycle returns the cycle of contender name.
func (e *Env) redisCycle(name string) (newWorker, error) {
	r, err := e.Redis()
	if err != nil {
		return nil, err
	}
	e.redisContOnce.Do(func() {
		e.redisCont, e.redisContErr = r.contenders(context.Background())
	})
	if e.redisContErr != nil {
		return nil, e.redisContErr
	}
	c := e.redisCont
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
	case "tenure-goredis":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				if _, err := c.gstore.Acquire(ctx, key, tok, TTL); err != nil {
					return err
				}
				return c.gstore.Release(ctx, key, tok)
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
	case "redislock":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				l, err := c.rlock.Obtain(ctx, key, TTL, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}, nil
	case "redsync":
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				m := c.rsync.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(TTL))
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("redsync: unlock failed")
				}
				return err
			}
		}, nil
	case "raw":
		gc := r.goredis
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				ok, err := gc.SetNX(ctx, key, "1", TTL).Result()
				if err != nil {
					return err
				}
				if !ok {
					return errNotAcquired
				}
				return gc.Del(ctx, key).Err()
			}
		}, nil
	case "raw-rueidis":
		rc := r.rueidis
		ms := TTL.Milliseconds()
		return func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				err := rc.Do(ctx, rc.B().Set().Key(key).Value("1").Nx().PxMilliseconds(ms).Build()).Error()
				if err != nil {
					return err // a nil reply (not set) is an error too
				}
				return rc.Do(ctx, rc.B().Del().Key(key).Build()).Error()
			}
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown redis contender %q", name)
}

// RedisCycle measures acquire+release cycles of contender on one Redis with
// workers concurrent workers. It skips b when redis-server is not installed.
func (e *Env) RedisCycle(b *testing.B, contender string, workers int) {
	nw, err := e.redisCycle(contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	r, _ := e.Redis()
	runCycles(b, "redis:"+contender, workers, nw, r.cpu)
}

// RedisClientContenders are the contenders of the redis-clients suite: the
// same fenced cycle as the redis suite's tenure (redisstore Acquire +
// Release) on each way of sending it, against redislock as the common
// yardstick.
//
//   - tenure: redisstore.New on the shared rueidis client with its
//     defaults (auto-pipelining): a lone call goes on a pooled connection
//     in the caller's goroutine, overlapping calls share the pipeline.
//   - tenure-nopipe: a rueidis client with DisableAutoPipelining, so every
//     call takes a pooled connection (one round trip per connection at a
//     time, as go-redis does).
//   - tenure-alwayspipe: a rueidis client with AlwaysPipelining; the store
//     still sends lone calls on a pooled connection, so this differs from
//     tenure only in how the client treats other commands.
//   - tenure-goredis: redisstore.NewGoRedis on the peers' go-redis client.
//   - redislock: as in the redis suite.
var RedisClientContenders = []string{"tenure", "tenure-nopipe", "tenure-alwayspipe", "tenure-goredis", "redislock"}

func init() {
	registerSuite("redis-clients", suiteFuncs{
		contenders: RedisClientContenders,
		cycle: func(e *Env, b *testing.B, contender string, workers int) {
			nw, err := e.redisClientCycle(contender)
			if errors.Is(err, ErrSkipped) {
				b.Skip(err)
			}
			if err != nil {
				b.Fatal(err)
			}
			r, _ := e.Redis()
			runCycles(b, "redis-clients:"+contender, workers, nw, r.cpu)
		},
		prepare: func(e *Env, contender string) error {
			_, err := e.redisClientCycle(contender)
			return err
		},
		server: func(e *Env) string { return e.Server("redis") },
	})
}

// extraRueidis holds each Env's rueidis clients with other options
// (*Env -> *extraClients).
var extraRueidis sync.Map

type extraClients struct {
	once   sync.Once
	stores map[string]lease.Store // contender -> store
	err    error
}

func (e *Env) redisClientCycle(name string) (newWorker, error) {
	switch name {
	case "tenure", "tenure-goredis", "redislock":
		return e.redisCycle(name)
	}
	r, err := e.Redis()
	if err != nil {
		return nil, err
	}
	v, _ := extraRueidis.LoadOrStore(e, &extraClients{})
	x := v.(*extraClients)
	x.once.Do(func() {
		x.stores = map[string]lease.Store{}
		for c, opt := range map[string]rueidis.ClientOption{
			"tenure-nopipe":     {InitAddress: []string{r.addr}, DisableRetry: true, DisableAutoPipelining: true},
			"tenure-alwayspipe": {InitAddress: []string{r.addr}, DisableRetry: true, AlwaysPipelining: true},
		} {
			rc, err := rueidis.NewClient(opt)
			if err != nil {
				x.err = fmt.Errorf("rueidis client (%s): %w", c, err)
				return
			}
			e.tb.Cleanup(rc.Close)
			st, err := redisstore.New(rc, nil)
			if err != nil {
				x.err = fmt.Errorf("redisstore (%s): %w", c, err)
				return
			}
			if err := st.Check(context.Background()); err != nil {
				x.err = fmt.Errorf("redisstore check (%s): %w", c, err)
				return
			}
			x.stores[c] = st.Leases()
		}
	})
	if x.err != nil {
		return nil, x.err
	}
	st, ok := x.stores[name]
	if !ok {
		return nil, fmt.Errorf("bench: unknown redis-clients contender %q", name)
	}
	return func(int) cycleFunc {
		return func(ctx context.Context, key string) error {
			tok := lease.NewToken()
			if _, err := st.Acquire(ctx, key, tok, TTL); err != nil {
				return err
			}
			return st.Release(ctx, key, tok)
		}
	}, nil
}
