package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// The idempotency suites measure what idempotency.Keeper.Do adds to a
// request, on Redis and on PostgreSQL, for a first execution (a key never
// seen: claim, run, record) and for a replay (a key already completed:
// answer from the record), each against:
//
//   - tenure: Keeper.Do with the store's view (redisstore: one script per
//     store call; pgstore: one statement per store call). A first
//     execution is Begin + Complete (2 round trips), a replay Begin (1).
//   - raw: the fewest commands that can do the same job without fences,
//     expiry judgement or input checks. Redis: SET key running NX PX 30000
//     then SET key value PX 86400000 for a first execution, GET key for a
//     replay. PostgreSQL: INSERT ... ON CONFLICT DO NOTHING then UPDATE
//     for a first execution, SELECT by primary key for a replay.
//   - handler: the bare handler alone (what a request costs without any
//     idempotency): returns a 64-byte receipt.
const (
	IdemRedisFirst  = "idem-redis-first"
	IdemRedisReplay = "idem-redis-replay"
	IdemPGFirst     = "idem-pg-first"
	IdemPGReplay    = "idem-pg-replay"
)

// IdemContenders are the contenders of every idempotency suite.
var IdemContenders = []string{"tenure", "raw", "handler"}

// IdemReplayKeys is the number of completed keys each worker replays.
const IdemReplayKeys = 16

// StoreCallsMetric is the number of idempotency store calls (each one
// round trip) per Do, reported by the tenure contender.
const StoreCallsMetric = "store-calls/op"

func init() {
	for _, s := range []string{IdemRedisFirst, IdemRedisReplay, IdemPGFirst, IdemPGReplay} {
		registerSuite(s, suiteFuncs{
			contenders: IdemContenders,
			cycle: func(e *Env, b *testing.B, contender string, workers int) {
				e.IdemCycle(b, s, contender, workers)
			},
			prepare: func(e *Env, contender string) error {
				_, err := e.idemCycle(s, contender)
				return err
			},
			server: func(e *Env) string {
				if s == IdemRedisFirst || s == IdemRedisReplay {
					return e.Server("redis")
				}
				return e.Server("postgres")
			},
		})
	}
}

// receipt is the handler's answer.
var receipt = []byte(`{"receipt":"rc_0123456789abcdef","amount":1000,"currency":"EUR","ok":1}`)[:64]

func handler(context.Context, *idempotency.Claim) ([]byte, error) { return receipt, nil }

// countingStore counts the store calls of Do.
type countingStore struct {
	idempotency.Store
	calls atomic.Int64
}

func (c *countingStore) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	c.calls.Add(1)
	return c.Store.Begin(ctx, b)
}

func (c *countingStore) Renew(ctx context.Context, id idempotency.ID, tok string, f uint64, ttl time.Duration) error {
	c.calls.Add(1)
	return c.Store.Renew(ctx, id, tok, f, ttl)
}

func (c *countingStore) Complete(ctx context.Context, id idempotency.ID, tok string, f uint64, o idempotency.Outcome, r time.Duration) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, id, tok, f, o, r)
}

func (c *countingStore) Release(ctx context.Context, id idempotency.ID, tok string) error {
	c.calls.Add(1)
	return c.Store.Release(ctx, id, tok)
}

// idemEnv is the idempotency state of one Env (see idemEnvs).
type idemEnv struct {
	mu       sync.Mutex
	keepers  map[string]*idempotency.Keeper // redis, postgres
	counters map[string]*countingStore
	replay   map[string][][]string // suite+contender -> per worker keys, populated
	nonce    string
	seq      atomic.Int64
}

// idemEnvs maps *Env to *idemEnv.
var idemEnvs sync.Map

func (e *Env) idem() *idemEnv {
	v, _ := idemEnvs.LoadOrStore(e, &idemEnv{
		keepers: map[string]*idempotency.Keeper{}, counters: map[string]*countingStore{},
		replay: map[string][][]string{}, nonce: rand.Text()[:8],
	})
	return v.(*idemEnv)
}

const idemRawTable = "bench_idem_raw"

// keeper returns the Keeper of a store ("redis" or "postgres").
func (e *Env) keeper(ctx context.Context, store string) (*idempotency.Keeper, *countingStore, error) {
	ie := e.idem()
	ie.mu.Lock()
	defer ie.mu.Unlock()
	if k := ie.keepers[store]; k != nil {
		return k, ie.counters[store], nil
	}
	var s idempotency.Store
	switch store {
	case "redis":
		r, err := e.Redis()
		if err != nil {
			return nil, nil, err
		}
		st, err := redisstore.New(r.rueidis, &redisstore.Options{Prefix: "bench:idem:"})
		if err != nil {
			return nil, nil, err
		}
		if err := st.Check(ctx); err != nil {
			return nil, nil, err
		}
		s = st.Idempotency()
	case "postgres":
		p, err := e.Postgres()
		if err != nil {
			return nil, nil, err
		}
		st, err := pgstore.New(p.pool, nil)
		if err != nil {
			return nil, nil, err
		}
		if err := st.Migrate(ctx); err != nil {
			return nil, nil, err
		}
		if _, err := p.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+idemRawTable+
			` (key text PRIMARY KEY, state text NOT NULL, value bytea)`); err != nil {
			return nil, nil, err
		}
		s = st.Idempotency()
	}
	cs := &countingStore{Store: s}
	k, err := idempotency.New(cs, nil)
	if err != nil {
		return nil, nil, err
	}
	ie.keepers[store], ie.counters[store] = k, cs
	return k, cs, nil
}

// uniqueKey returns a key never used before.
func (ie *idemEnv) uniqueKey() string {
	return "first-" + ie.nonce + "-" + strconv.FormatInt(ie.seq.Add(1), 10)
}

const idemScope = "bench-user POST /receipts"

var idemFP = idempotency.Fingerprint([]byte(`{"amount":1000}`))

func idemReq(key string) idempotency.Request {
	return idempotency.Request{Scope: idemScope, Key: key, Fingerprint: idemFP}
}

var errNotReplayed = errors.New("bench: a completed key was not replayed")

// replayKeys returns worker w's completed keys for suite and contender,
// completing them with first on first use.
func (ie *idemEnv) replayKeys(ctx context.Context, name string, w int, first func(ctx context.Context, key string) error) ([]string, error) {
	ie.mu.Lock()
	defer ie.mu.Unlock()
	ks := ie.replay[name]
	for len(ks) <= w {
		ks = append(ks, nil)
	}
	if ks[w] == nil {
		keys := make([]string, IdemReplayKeys)
		for i := range keys {
			keys[i] = "replay-" + ie.nonce + "-" + name + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
			if err := first(ctx, keys[i]); err != nil {
				return nil, err
			}
		}
		ks[w] = keys
	}
	ie.replay[name] = ks
	return ks[w], nil
}

// idemCycle returns the per-worker calls of contender in suite.
func (e *Env) idemCycle(suite, contender string) (newWorker, error) {
	ctx := context.Background()
	store := "redis"
	if suite == IdemPGFirst || suite == IdemPGReplay {
		store = "postgres"
	}
	replay := suite == IdemRedisReplay || suite == IdemPGReplay
	k, _, err := e.keeper(ctx, store)
	if err != nil {
		return nil, err
	}
	ie := e.idem()

	var first, again func(ctx context.Context, key string) error
	switch contender {
	case "handler":
		return func(int) cycleFunc {
			return func(ctx context.Context, _ string) error {
				_, err := handler(ctx, nil)
				return err
			}
		}, nil
	case "tenure":
		first = func(ctx context.Context, key string) error {
			res, err := k.Do(ctx, idemReq(key), handler)
			if err == nil && res.Replayed {
				err = errors.New("bench: a new key was replayed")
			}
			return err
		}
		again = func(ctx context.Context, key string) error {
			res, err := k.Do(ctx, idemReq(key), handler)
			if err == nil && !res.Replayed {
				err = errNotReplayed
			}
			return err
		}
	case "raw":
		first, again, err = e.rawIdem(store)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("bench: unknown idempotency contender %q", contender)
	}
	if !replay {
		return func(int) cycleFunc {
			return func(ctx context.Context, _ string) error { return first(ctx, ie.uniqueKey()) }
		}, nil
	}
	name := suite + "/" + contender
	// Complete worker 0's keys now, so Prepare reports a failure.
	if _, err := ie.replayKeys(ctx, name, 0, first); err != nil {
		return nil, err
	}
	return func(w int) cycleFunc {
		keys, err := ie.replayKeys(ctx, name, w, first)
		i := 0
		return func(ctx context.Context, _ string) error {
			if err != nil {
				return err
			}
			i++
			return again(ctx, keys[i%len(keys)])
		}
	}, nil
}

// rawIdem returns the raw baseline's first execution and replay.
func (e *Env) rawIdem(store string) (first, again func(ctx context.Context, key string) error, err error) {
	if store == "redis" {
		r, err := e.Redis()
		if err != nil {
			return nil, nil, err
		}
		rc := r.rueidis
		return func(ctx context.Context, key string) error {
				key = "bench:idem-raw:" + key
				if err := rc.Do(ctx, rc.B().Set().Key(key).Value("running").Nx().PxMilliseconds(30000).Build()).Error(); err != nil {
					return err // a nil reply (taken) is an error too
				}
				v, _ := handler(ctx, nil)
				return rc.Do(ctx, rc.B().Set().Key(key).Value(string(v)).PxMilliseconds(86400000).Build()).Error()
			}, func(ctx context.Context, key string) error {
				v, err := rc.Do(ctx, rc.B().Get().Key("bench:idem-raw:"+key).Build()).AsBytes()
				if err == nil && len(v) != len(receipt) {
					err = errNotReplayed
				}
				return err
			}, nil
	}
	p, err := e.Postgres()
	if err != nil {
		return nil, nil, err
	}
	pool := p.pool
	return func(ctx context.Context, key string) error {
			tag, err := pool.Exec(ctx, `INSERT INTO `+idemRawTable+` (key, state) VALUES ($1, 'running') ON CONFLICT DO NOTHING`, key)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errors.New("bench: raw claim of a new key failed")
			}
			v, _ := handler(ctx, nil)
			_, err = pool.Exec(ctx, `UPDATE `+idemRawTable+` SET state = 'done', value = $2 WHERE key = $1`, key, v)
			return err
		}, func(ctx context.Context, key string) error {
			var v []byte
			err := pool.QueryRow(ctx, `SELECT value FROM `+idemRawTable+` WHERE key = $1`, key).Scan(&v)
			if err == nil && len(v) != len(receipt) {
				err = errNotReplayed
			}
			return err
		}, nil
}

// IdemCycle measures Do calls (or a baseline's) per second in suite with
// workers concurrent workers, and reports the store calls per Do for the
// tenure contender. It skips b when the server is not installed.
func (e *Env) IdemCycle(b *testing.B, suite, contender string, workers int) {
	nw, err := e.idemCycle(suite, contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	var cpu func(context.Context) (time.Duration, error)
	store := "redis"
	if suite == IdemPGFirst || suite == IdemPGReplay {
		store = "postgres"
		if pid := e.pg.postmaster; pid > 0 {
			cpu = func(context.Context) (time.Duration, error) { return postgresCPU(pid) }
		}
	} else if r, err := e.Redis(); err == nil {
		cpu = r.cpu
	}
	for w := range workers {
		nw(w) // complete the replay keys now, not in the count
	}
	_, counter, _ := e.keeper(context.Background(), store)
	before := counter.calls.Load()
	runCycles(b, suite+":"+contender, workers, nw, cpu)
	if contender == "tenure" {
		b.ReportMetric(float64(counter.calls.Load()-before)/float64(b.N), StoreCallsMetric)
	}
}
