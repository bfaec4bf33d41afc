package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// The schedule benchmarks measure fenced slot completions per second: the
// step that makes a slot's effect happen once. Each completion applies a
// business change (add 1 to the worker's counter) together with the slot's
// completion:
//
//   - tenure: PostgreSQL: BEGIN; UPDATE the worker's counter row;
//     pgstore.CompleteSlot (one statement: lock the claim's lease row if
//     token, fence and expiry still match, insert (job, slot) into the
//     ledger, mark the slot's record done); COMMIT. Redis: one
//     redisstore.CompleteSlot script (claim check, ledger, record, INCRBY
//     of the job's counter). Slots are claimed (lease + Begin) before the
//     timer starts, so the figure is completions alone.
//   - raw: the seed's unfenced baseline, the fewest statements that keep a
//     ledger: PostgreSQL: BEGIN; UPDATE the counter; INSERT INTO a ledger
//     ... ON CONFLICT DO NOTHING; COMMIT. Redis: HSETNX ledger + INCRBY in
//     one script. No claim, no fence, no expiry, no audit record.
//   - tenure-batch (PostgreSQL): the same completion with the business
//     UPDATE and pgstore.QueueCompleteSlot in one pgx batch: one round
//     trip, one implicit transaction (a refusal raises and aborts it).
//   - raw-batch (PostgreSQL): raw's two statements in one batch.
//   - tenure-cycle: a whole slot as the scheduler runs it: Scheduler.Claim
//     (claim lease + Begin), the tenure completion, Scheduler.Finish
//     (Finish + release of the claim). The figure is slots executed.
const (
	SchedPG    = "schedule-pg"
	SchedRedis = "schedule-redis"
)

// SchedContenders are the contenders of the schedule suites.
var SchedContenders = []string{"tenure", "raw", "tenure-batch", "raw-batch", "tenure-cycle"}

// SchedRedisContenders are the contenders of the Redis schedule suite (a
// Redis completion is already one round trip).
var SchedRedisContenders = []string{"tenure", "raw", "tenure-cycle"}

// SchedContendersOf returns the contenders of a schedule suite.
func SchedContendersOf(suite string) []string {
	if suite == SchedRedis {
		return SchedRedisContenders
	}
	return SchedContenders
}

// schedClaimTTL is the claim lease time of the benchmark's slots: long
// enough for every pre-claimed slot to be completed in one run.
const schedClaimTTL = 30 * time.Minute

// schedEnv is the schedule benchmarks' state on one Env.
type schedEnv struct {
	pgOnce   sync.Once
	pg       *pgstore.Store
	pgPool   *pgxpool.Pool
	pgErr    error
	redOnce  sync.Once
	red      *redisstore.Store
	redErr   error
	redisCli rueidis.Client
}

var (
	schedMu   sync.Mutex
	schedEnvs = map[*Env]*schedEnv{}
)

func (e *Env) sched() *schedEnv {
	schedMu.Lock()
	defer schedMu.Unlock()
	s := schedEnvs[e]
	if s == nil {
		s = &schedEnv{}
		schedEnvs[e] = s
	}
	return s
}

const schedSchema = "tenure_bench_sched"

func (e *Env) schedPG() (*schedEnv, error) {
	se := e.sched()
	se.pgOnce.Do(func() {
		p, err := e.Postgres()
		if err != nil {
			se.pgErr = err
			return
		}
		ctx := context.Background()
		db, err := pgstore.New(p.pool, &pgstore.Options{Schema: schedSchema})
		if err != nil {
			se.pgErr = err
			return
		}
		if err := db.Migrate(ctx); err != nil {
			se.pgErr = err
			return
		}
		for _, q := range []string{
			`CREATE TABLE IF NOT EXISTS ` + schedSchema + `.counters (worker int PRIMARY KEY, n bigint NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS ` + schedSchema + `.raw_ledger (job text NOT NULL, slot_id text NOT NULL, PRIMARY KEY (job, slot_id))`,
			`INSERT INTO ` + schedSchema + `.counters SELECT g, 0 FROM generate_series(0, ` + strconv.Itoa(MaxWorkers) + `) g ON CONFLICT DO NOTHING`,
		} {
			if _, err := p.pool.Exec(ctx, q); err != nil {
				se.pgErr = err
				return
			}
		}
		se.pg, se.pgPool = db, p.pool
	})
	return se, se.pgErr
}

func (e *Env) schedRedis() (*schedEnv, error) {
	se := e.sched()
	se.redOnce.Do(func() {
		r, err := e.Redis()
		if err != nil {
			se.redErr = err
			return
		}
		st, err := redisstore.New(r.rueidis, &redisstore.Options{Prefix: "bench-sched:"})
		if err != nil {
			se.redErr = err
			return
		}
		if err := st.Check(context.Background()); err != nil {
			se.redErr = err
			return
		}
		se.red, se.redisCli = st, r.rueidis
	})
	return se, se.redErr
}

// schedRun is one benchmark run: a fresh job whose slots are milliseconds
// in the past, so each run starts with an empty ledger.
type schedRun struct {
	store schedule.Store
	sched *schedule.Scheduler
	job   string
	base  time.Time
	next  atomic.Int64
}

func newSchedRun(ctx context.Context, store schedule.Store) (*schedRun, error) {
	now, err := store.Now(ctx)
	if err != nil {
		return nil, err
	}
	r := &schedRun{store: store, job: "bench-" + strings.ToLower(rand.Text()[:10]),
		base: now.Add(-time.Minute).Truncate(time.Millisecond)}
	if r.sched, err = schedule.New(store, &schedule.Options{Node: "bench", ClaimTTL: schedClaimTTL}); err != nil {
		return nil, err
	}
	// Every(1ms): slot i is base - i ms, due on every store clock.
	if err := r.sched.Add(schedule.Job{Name: r.job, Schedule: schedule.Every(time.Millisecond),
		Run: func(context.Context, *schedule.Slot) error { return nil }}); err != nil {
		return nil, err
	}
	return r, nil
}

// claimNext claims the next unused slot.
func (r *schedRun) claimNext(ctx context.Context) (*schedule.Slot, error) {
	i := r.next.Add(1)
	return r.sched.Claim(ctx, r.job, r.base.Add(-time.Duration(i)*time.Millisecond))
}

// preclaim claims n slots with workers goroutines.
func (r *schedRun) preclaim(ctx context.Context, n, workers int) ([]*schedule.Slot, error) {
	slots := make([]*schedule.Slot, n)
	var idx atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var first error
	for range max(min(workers, n), 1) {
		wg.Go(func() {
			for {
				i := int(idx.Add(1)) - 1
				if i >= n {
					return
				}
				s, err := r.claimNext(ctx)
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				slots[i] = s
			}
		})
	}
	wg.Wait()
	return slots, first
}

var errSchedNotApplied = errors.New("bench: a completion was refused")

// SchedCycle measures contender of suite (SchedPG or SchedRedis) with
// workers workers. It skips b when the server is not installed.
func (e *Env) SchedCycle(b *testing.B, suite, contender string, workers int) {
	ctx := context.Background()
	var (
		store               schedule.Store
		complete, completeB func(ctx context.Context, w int, slot *schedule.Slot) error
		raw, rawB           func(ctx context.Context, w int, job, id string) error
		cpu                 func(context.Context) (time.Duration, error)
	)
	switch suite {
	case SchedPG:
		se, err := e.schedPG()
		if errors.Is(err, ErrSkipped) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		store = se.pg.Schedules()
		pool, db := se.pgPool, se.pg
		const bump = `UPDATE ` + schedSchema + `.counters SET n = n + 1 WHERE worker = $1`
		complete = func(ctx context.Context, w int, slot *schedule.Slot) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, bump, w); err != nil {
					return err
				}
				return db.PgxTx(tx).CompleteSlot(ctx, slot)
			})
		}
		const rawLedger = `INSERT INTO ` + schedSchema + `.raw_ledger (job, slot_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
		raw = func(ctx context.Context, w int, job, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, bump, w); err != nil {
					return err
				}
				tag, err := tx.Exec(ctx, rawLedger, job, id)
				if err == nil && tag.RowsAffected() != 1 {
					err = errSchedNotApplied
				}
				return err
			})
		}
		completeB = func(ctx context.Context, w int, slot *schedule.Slot) error {
			b := &pgx.Batch{}
			b.Queue(bump, w)
			if err := db.QueueCompleteSlot(b, slot); err != nil {
				return err
			}
			return pool.SendBatch(ctx, b).Close()
		}
		rawB = func(ctx context.Context, w int, job, id string) error {
			b := &pgx.Batch{}
			b.Queue(bump, w)
			b.Queue(rawLedger, job, id).Exec(func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() != 1 {
					return errSchedNotApplied
				}
				return nil
			})
			return pool.SendBatch(ctx, b).Close()
		}
		if pid := e.pg.postmaster; pid > 0 {
			cpu = func(context.Context) (time.Duration, error) { return postgresCPU(pid) }
		}
	case SchedRedis:
		se, err := e.schedRedis()
		if errors.Is(err, ErrSkipped) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		store = se.red.Schedules()
		red, c := se.red, se.redisCli
		complete = func(ctx context.Context, w int, slot *schedule.Slot) error {
			return red.CompleteSlot(ctx, slot, redisstore.AddSlotValue("counter:"+strconv.Itoa(w), 1))
		}
		script := rueidis.NewLuaScript(`if redis.call('HSETNX', KEYS[1], ARGV[1], '1') == 0 then return 0 end
redis.call('INCRBY', KEYS[2], 1) return 1`)
		raw = func(ctx context.Context, w int, job, id string) error {
			n, err := script.Exec(ctx, c, []string{"bench-sched-raw:{" + job + "}:ledger", "bench-sched-raw:{" + job + "}:counter:" + strconv.Itoa(w)},
				[]string{id}).AsInt64()
			if err == nil && n != 1 {
				err = errSchedNotApplied
			}
			return err
		}
		if r, err := e.Redis(); err == nil {
			cpu = r.cpu
		}
	default:
		b.Fatalf("bench: unknown schedule suite %q", suite)
	}
	if suite == SchedPG {
		// Every run starts on empty tables, so that runs do not slow down
		// as earlier runs' rows pile up.
		se, _ := e.schedPG()
		if _, err := se.pgPool.Exec(ctx, `TRUNCATE `+schedSchema+`.leases, `+schedSchema+`.schedule_slots, `+
			schedSchema+`.schedule_ledger, `+schedSchema+`.raw_ledger`); err != nil {
			b.Fatalf("truncate: %v", err)
		}
	}
	run, err := newSchedRun(ctx, store)
	if err != nil {
		b.Fatal(err)
	}
	var nw newWorker
	if contender == "tenure-batch" || contender == "raw-batch" {
		if completeB == nil {
			b.Skipf("no %s contender on %s", contender, suite)
		}
		complete, raw = completeB, rawB
		contender = strings.TrimSuffix(contender, "-batch")
	}
	switch contender {
	case "tenure":
		slots, err := run.preclaim(ctx, b.N, MaxWorkers)
		if err != nil {
			b.Fatalf("pre-claim: %v", err)
		}
		if suite == SchedPG {
			// The pre-claims wrote b.N leases and records; vacuum them now
			// rather than let autovacuum run during the measurement.
			se, _ := e.schedPG()
			if _, err := se.pgPool.Exec(ctx, `VACUUM ANALYZE `+schedSchema+`.leases, `+schedSchema+`.schedule_slots`); err != nil {
				b.Fatalf("vacuum: %v", err)
			}
		}
		var idx atomic.Int64
		nw = func(w int) cycleFunc {
			return func(ctx context.Context, _ string) error {
				return complete(ctx, w, slots[idx.Add(1)-1])
			}
		}
	case "raw":
		var idx atomic.Int64
		nw = func(w int) cycleFunc {
			return func(ctx context.Context, _ string) error {
				return raw(ctx, w, run.job, strconv.FormatInt(idx.Add(1), 10))
			}
		}
	case "tenure-cycle":
		nw = func(w int) cycleFunc {
			return func(ctx context.Context, _ string) error {
				slot, err := run.claimNext(ctx)
				if err != nil {
					return err
				}
				if err := complete(ctx, w, slot); err != nil {
					return err
				}
				_, err = run.sched.Finish(ctx, slot, nil)
				return err
			}
		}
	default:
		b.Fatalf("bench: unknown schedule contender %q", contender)
	}
	runCycles(b, suite+":"+contender, workers, nw, cpu)
	b.StopTimer()
	if contender != "raw" {
		// Every slot done, once.
		recs, err := store.Slots(ctx, run.job, run.base.Add(-time.Hour), run.base.Add(time.Second), 0)
		if err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, r := range recs {
			if r.State == schedule.Done {
				done++
			}
		}
		if done != b.N {
			b.Fatalf("%d slots done after %d completions", done, b.N)
		}
	}
}

// SchedServer describes the server of a schedule suite.
func (e *Env) SchedServer(suite string) string {
	if suite == SchedPG {
		return e.Server("postgres")
	}
	return e.Server("redis")
}
