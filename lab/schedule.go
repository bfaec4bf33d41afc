package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

func init() {
	supports := func(env *Env) bool { return env.Mem != nil || env.SQLite != nil || env.PG != nil || env.Redis != nil }
	register(
		Experiment{
			Name:     "slot-once",
			Shows:    "Two workers race for one scheduled slot: the business change is applied once.",
			Want:     "workers=2 businessApplied=1",
			Supports: supports,
			Run:      slotOnce,
		},
		Experiment{
			Name:     "failed-slot-retries",
			Shows:    "A slot whose handler failed rolls its change back and runs again, applying it once.",
			Want:     "rolledBack=true retryApplied=1",
			Supports: supports,
			Run:      failedSlotRetries,
		},
	)
}

// settlements is where the business change lands: a counter per
// job ("UPDATE counter SET value = value + 1"), incremented together with
// the slot's completion: in the same transaction where the store is a SQL
// database, in the store's fenced completion script otherwise.
type settlements struct {
	path string // "tx" or "fenced-completion"
	// settle applies the business change and completes slot in one step.
	// With fail, the SQL path makes both writes and then fails before
	// commit (the transaction rolls back); the other path fails before its
	// single atomic step.
	settle  func(ctx context.Context, slot *schedule.Slot, fail bool) error
	applied func(ctx context.Context, job string) (int, error)
}

var errSettleFailed = errors.New("lab: the settlement failed before commit")

const settleTable = "tenure_lab_settlements"

// settleMu serializes the creation of the settlements tables: the two
// experiments run concurrently, and concurrent CREATE TABLE IF NOT EXISTS
// of one table can fail on PostgreSQL.
var settleMu sync.Mutex

func newSettlements(ctx context.Context, env *Env) (*settlements, error) {
	settleMu.Lock()
	defer settleMu.Unlock()
	switch {
	case env.Mem != nil, env.Redis != nil:
		complete := func(ctx context.Context, slot *schedule.Slot) error {
			if env.Mem != nil {
				return env.Mem.CompleteSlot(ctx, slot, memstore.AddSlotValue("settled", 1))
			}
			return env.Redis.CompleteSlot(ctx, slot, redisstore.AddSlotValue("settled", 1))
		}
		return &settlements{path: "fenced-completion",
			settle: func(ctx context.Context, slot *schedule.Slot, fail bool) error {
				if fail {
					return errSettleFailed
				}
				return complete(ctx, slot)
			},
			applied: func(ctx context.Context, job string) (int, error) {
				var b []byte
				var err error
				if env.Mem != nil {
					b, err = env.Mem.SlotValue(ctx, job, "settled")
				} else {
					b, err = env.Redis.SlotValue(ctx, job, "settled")
				}
				if err != nil || len(b) == 0 {
					return 0, err
				}
				return strconv.Atoi(string(b))
			}}, nil
	case env.SQLite != nil:
		db := env.SQLite.DB()
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+settleTable+` (job TEXT PRIMARY KEY, value INTEGER NOT NULL)`); err != nil {
			return nil, err
		}
		return &settlements{path: "tx",
			settle: func(ctx context.Context, slot *schedule.Slot, fail bool) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+settleTable+` (job, value) VALUES (?, 1)
					ON CONFLICT (job) DO UPDATE SET value = value + 1`, slot.Job); err != nil {
					return err
				}
				if err := env.SQLite.Tx(tx).CompleteSlot(ctx, slot); err != nil {
					return err
				}
				if fail {
					return errSettleFailed
				}
				return tx.Commit()
			},
			applied: func(ctx context.Context, job string) (int, error) {
				var n int
				err := db.QueryRowContext(ctx, `SELECT value FROM `+settleTable+` WHERE job = ?`, job).Scan(&n)
				if errors.Is(err, sql.ErrNoRows) {
					return 0, nil
				}
				return n, err
			}}, nil
	case env.PG != nil:
		pr, ok := env.Resource.(*pgResource)
		if !ok {
			return nil, errors.New("lab: postgres env without its pool")
		}
		table := pgx.Identifier{env.PG.Schema(), "lab_settlements"}.Sanitize()
		if _, err := pr.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (job text PRIMARY KEY, value int NOT NULL)`); err != nil {
			return nil, err
		}
		return &settlements{path: "tx",
			settle: func(ctx context.Context, slot *schedule.Slot, fail bool) error {
				return pgx.BeginFunc(ctx, pr.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO `+table+` AS t (job, value) VALUES ($1, 1)
						ON CONFLICT (job) DO UPDATE SET value = t.value + 1`, slot.Job); err != nil {
						return err
					}
					if err := env.PG.PgxTx(tx).CompleteSlot(ctx, slot); err != nil {
						return err
					}
					if fail {
						return errSettleFailed
					}
					return nil
				})
			},
			applied: func(ctx context.Context, job string) (int, error) {
				var n int
				err := pr.pool.QueryRow(ctx, `SELECT value FROM `+table+` WHERE job = $1`, job).Scan(&n)
				if errors.Is(err, pgx.ErrNoRows) {
					return 0, nil
				}
				return n, err
			}}, nil
	}
	return nil, errors.New("lab: store without scheduled jobs")
}

func (env *Env) schedules() schedule.Store {
	switch {
	case env.Mem != nil:
		return env.Mem.Schedules()
	case env.SQLite != nil:
		return env.SQLite.Schedules()
	case env.PG != nil:
		return env.PG.Schedules()
	case env.Redis != nil:
		return env.Redis.Schedules()
	}
	return nil
}

// labJob returns a job name unique to this run (job names allow no slash).
func labJob(env *Env, name string) string {
	return strings.NewReplacer("/", ".").Replace(env.Prefix) + name
}

// oneSlot is a schedule with a single slot.
type oneSlot struct{ at time.Time }

func (o oneSlot) Next(t time.Time) time.Time {
	if t.Before(o.at) {
		return o.at
	}
	return time.Time{}
}

func (o oneSlot) ID(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (o oneSlot) String() string { return "once at " + o.ID(o.at) }

// slotOnce: one claim of (settle, SLOT) is completed by two workers at the
// same moment; the ledger lets one of them apply the business change.
func slotOnce(ctx context.Context, env *Env) ([]KV, []KV, error) {
	book, err := newSettlements(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	store := env.schedules()
	job := labJob(env, "settle")
	now, err := store.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	at := now.Add(-time.Second).Truncate(time.Millisecond)
	s, err := schedule.New(store, &schedule.Options{Node: "lab", ClaimTTL: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	if err := s.Add(schedule.Job{Name: job, Schedule: oneSlot{at}, Run: func(context.Context, *schedule.Slot) error { return nil }}); err != nil {
		return nil, nil, err
	}
	slot, err := s.Claim(ctx, job, at)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	const workers = 2
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			<-start
			errs[i] = book.settle(ctx, slot, false)
		})
	}
	close(start)
	wg.Wait()
	duplicates := 0
	for _, err := range errs {
		switch {
		case errors.Is(err, schedule.ErrCompleted):
			duplicates++
		case err != nil:
			return nil, nil, fmt.Errorf("worker: %w", err)
		}
	}
	if _, err := s.Finish(ctx, slot, nil); err != nil {
		return nil, nil, fmt.Errorf("finish: %w", err)
	}
	applied, err := book.applied(ctx, job)
	if err != nil {
		return nil, nil, err
	}
	return []KV{{"workers", strconv.Itoa(workers)}, {"businessApplied", strconv.Itoa(applied)}},
		[]KV{{"path", book.path}, {"duplicateRefused", strconv.Itoa(duplicates)}}, nil
}

// failedSlotRetries: the scheduler runs a slot whose first attempt writes
// the business change and the ledger row and then fails; both roll back,
// and the retry (attempt 2) applies once.
func failedSlotRetries(ctx context.Context, env *Env) ([]KV, []KV, error) {
	book, err := newSettlements(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	store := env.schedules()
	job := labJob(env, "settle-retry")
	now, err := store.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	at := now.Add(300 * time.Millisecond).Truncate(time.Millisecond)
	var (
		mu         sync.Mutex
		rolledBack *bool
		runErr     error
	)
	s, err := schedule.New(store, &schedule.Options{Node: "lab", PollInterval: 10 * time.Millisecond, ClaimTTL: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	err = s.Add(schedule.Job{Name: job, Schedule: oneSlot{at}, Retry: schedule.Retry{Attempts: 2, Backoff: 50 * time.Millisecond},
		Run: func(ctx context.Context, slot *schedule.Slot) error {
			if slot.Attempt > 1 {
				return book.settle(ctx, slot, false)
			}
			err := book.settle(ctx, slot, true)
			if !errors.Is(err, errSettleFailed) {
				mu.Lock()
				runErr = fmt.Errorf("first attempt: %v", err)
				mu.Unlock()
				return err
			}
			// After the rollback: no business change, no ledger row.
			applied, aerr := book.applied(ctx, job)
			rec, rerr := store.Slot(ctx, job, slot.ID)
			mu.Lock()
			defer mu.Unlock()
			if aerr != nil || rerr != nil {
				runErr = errors.Join(aerr, rerr)
				return err
			}
			ok := applied == 0 && rec.State == schedule.Running
			rolledBack = &ok
			return err
		}})
	if err != nil {
		return nil, nil, err
	}
	rctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	done := make(chan struct{})
	go func() {
		s.Run(rctx)
		close(done)
	}()
	var rec schedule.Record
	for {
		rec, err = store.Slot(ctx, job, oneSlot{}.ID(at))
		if err == nil && rec.Final() {
			break
		}
		if rctx.Err() != nil {
			stop()
			<-done
			return nil, nil, fmt.Errorf("slot not final in time (last record %+v, %v)", rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if runErr != nil {
		return nil, nil, runErr
	}
	if rolledBack == nil {
		return nil, nil, errors.New("the first attempt never ran")
	}
	applied, err := book.applied(ctx, job)
	if err != nil {
		return nil, nil, err
	}
	return []KV{{"rolledBack", strconv.FormatBool(*rolledBack)}, {"retryApplied", strconv.Itoa(applied)}},
		[]KV{{"path", book.path}, {"attempts", strconv.Itoa(rec.Attempts)}, {"state", string(rec.State)}}, nil
}
