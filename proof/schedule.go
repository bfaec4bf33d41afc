package proof

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

func init() {
	register(&workload{
		name:    "schedule",
		summary: "three scheduler nodes run a short-period job while nodes are paused, killed (SIGKILL) and restarted; each slot's effect happens exactly once and no slot in the window is lost",
		supports: func(k storeurl.Kind) string {
			switch k {
			case storeurl.Etcd:
				return "etcd keeps leases only; tenure does not offer schedules on it"
			case storeurl.Memory:
				return "the memory store lives in one process, so a scheduler node cannot be paused or killed apart from its keep-alive; run it on SQLite or a server"
			}
			return ""
		},
		setup:   schedSetup,
		worker:  schedWorker,
		check:   schedCheck,
		kills:   true,
		settle:  func(ttl time.Duration) time.Duration { return 4 * ttl },
		settled: schedSettled,
	})
}

// schedWindow returns the slot IDs the check judges in mode's job: every
// slot after the job's registration (the first poll of the first node
// that started: a new job runs no slot from before it) and two periods
// after the start, up to the end of the faults (the jobs' last slot).
func schedWindow(ctx context.Context, w *workerEnv, ri *runInfo, mode string) ([]string, error) {
	def, err := w.scheduleStore().Definition(ctx, schedJob(w, mode))
	if err != nil {
		return nil, fmt.Errorf("the job's definition: %w", err)
	}
	period := schedPeriod(ri.ttl)
	every := schedule.Every(period)
	from := ri.start.Add(2 * period)
	if def.Registered.After(from) {
		from = def.Registered
	}
	var ids []string
	for t := every.Next(from); !t.After(ri.faultsEnd); t = every.Next(t) {
		ids = append(ids, every.ID(t))
	}
	return ids, nil
}

// schedSettled reports whether every slot of the window has a final
// record in the guarded job: the nodes are done with it, so the check
// judges its effect, not how far behind a loaded machine left the nodes.
func schedSettled(ctx context.Context, w *workerEnv, ri *runInfo) (bool, error) {
	ids, err := schedWindow(ctx, w, ri, Guarded)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		r, err := w.scheduleStore().Slot(ctx, schedJob(w, Guarded), id)
		if err != nil || !r.Final() {
			return false, err
		}
	}
	return true, nil
}

// lastSlot is a schedule that ends at a time: the jobs have no slot after
// the faults end, so that the nodes, settling, finish the window's slots
// instead of taking new ones.
type lastSlot struct {
	schedule.Schedule
	last time.Time
}

func (l lastSlot) Next(t time.Time) time.Time {
	if at := l.Schedule.Next(t); !at.After(l.last) {
		return at
	}
	return time.Time{}
}

const pgSlotEffects = "tenure_lab.tenure_proof_slot_effects"

// schedPeriod is the jobs' period: 2/5 of the claim TTL, at least 40ms
// (40ms at the TTL of 100ms: 25 slots a second per job).
func schedPeriod(ttl time.Duration) time.Duration {
	return max(ttl*2/5, 40*time.Millisecond).Truncate(time.Millisecond)
}

func schedJob(w *workerEnv, mode string) string {
	return strings.ReplaceAll(strings.Trim(w.spec.Prefix, "/"), "/", ".") + "." + mode
}

func schedSetup(ctx context.Context, w *workerEnv) error {
	if err := ledgerSetup(ctx, w); err != nil {
		return err
	}
	if w.kind == storeurl.Postgres {
		_, err := w.pg.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+pgSlotEffects+` (job text NOT NULL, slot text NOT NULL, proc text NOT NULL, fence bigint NOT NULL)`)
		return err
	}
	return nil
}

// schedWorker is one scheduler node with two jobs of the same period: the
// guarded one completes each slot in the same step as its effect; the
// control applies its effect with no completion check.
func schedWorker(ctx context.Context, w *workerEnv) error {
	ttl := w.spec.TTL
	period := schedPeriod(ttl)
	s, err := schedule.New(w.scheduleStore(), &schedule.Options{
		Node: w.spec.Proc, PollInterval: period / 4, ClaimTTL: ttl, StopTimeout: time.Second,
	})
	if err != nil {
		return err
	}
	for _, mode := range []string{Guarded, Control} {
		err := s.Add(schedule.Job{
			Name: schedJob(w, mode), Schedule: lastSlot{schedule.Every(period), time.Unix(0, w.spec.End)},
			Misfire: schedule.MisfireCatchUp, CatchUpWindow: time.Hour, CatchUpConcurrency: 4,
			Overlap: schedule.OverlapAllow,
			Retry:   schedule.Retry{Attempts: 10, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
			Run: func(ctx context.Context, slot *schedule.Slot) error {
				p := w.rec.Invoke(mode, "run", slot.ID, "", slot.Fence)
				w.sleep(ctx, w.spec.TTL/2) // a pause here outlasts the claim
				err := schedEffect(context.WithoutCancel(ctx), w, mode, slot)
				p.End("", slot.Fence, err)
				return err
			},
		})
		if err != nil {
			return err
		}
	}
	err = s.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func schedEffect(ctx context.Context, w *workerEnv, mode string, slot *schedule.Slot) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if mode == Control {
		return w.addEffect(ctx, Control, slot.ID, slot.Fence, w.spec.Proc)
	}
	switch w.kind {
	case storeurl.SQLite:
		tx, err := w.env.SQLite.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := w.env.SQLite.Tx(tx).CompleteSlot(ctx, slot); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO proof_effects (run, mode, key, proc, fence, value) VALUES (?, ?, ?, ?, ?, ?)`,
			w.spec.Prefix, Guarded, slot.ID, w.spec.Proc, slot.Fence, w.spec.Proc); err != nil {
			return err
		}
		return tx.Commit()
	case storeurl.Postgres:
		return pgx.BeginFunc(ctx, w.pg, func(tx pgx.Tx) error {
			if err := w.pgCompleteSlot(ctx, tx, slot); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+pgSlotEffects+` (job, slot, proc, fence) VALUES ($1, $2, $3, $4)`,
				slot.Job, slot.ID, w.spec.Proc, int64(slot.Fence))
			return err
		})
	case storeurl.Redis:
		return w.env.Redis.CompleteSlot(ctx, slot, redisstore.AddSlotValue("n:"+slot.ID, 1))
	}
	return w.env.Mem.CompleteSlot(ctx, slot, memstore.AddSlotValue("n:"+slot.ID, 1))
}

// slotEffects returns how many times each slot's effect happened.
func slotEffects(ctx context.Context, w *workerEnv, mode string, ids []string) (map[string]int, error) {
	out := map[string]int{}
	job := schedJob(w, mode)
	switch {
	case mode == Control || w.kind == storeurl.SQLite:
		effs, err := w.effects(ctx, mode)
		if err != nil {
			return nil, err
		}
		for k, v := range effs {
			out[k] = len(v)
		}
	case w.kind == storeurl.Postgres:
		rows, err := w.pg.Query(ctx, `SELECT slot, count(*) FROM `+pgSlotEffects+` WHERE job = $1 GROUP BY slot`, job)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			out[id] = n
		}
		return out, rows.Err()
	default:
		for _, id := range ids {
			var b []byte
			var err error
			if w.kind == storeurl.Redis {
				b, err = w.env.Redis.SlotValue(ctx, job, "n:"+id)
			} else {
				b, err = w.env.Mem.SlotValue(ctx, job, "n:"+id)
			}
			if err != nil {
				return nil, err
			}
			if len(b) > 0 {
				n, _ := strconv.Atoi(string(b))
				out[id] = n
			}
		}
	}
	return out, nil
}

// schedCheck: every slot from a little after the start (and after the
// job's registration) to the end of the faults must have had its effect
// exactly once. The run waited for the
// guarded job's slots to be final (schedSettled, up to the check timeout):
// a slot without effect is one that ended without it, or that the nodes
// still had not finished by then.
func schedCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	runs := h.Select(mode, "run")
	m.countOps(runs)
	ids, err := schedWindow(ctx, w, ri, mode)
	if err != nil {
		m.violate("cannot tell which slots the run covers: %v", err)
		return m
	}
	effects, err := slotEffects(ctx, w, mode, ids)
	if err != nil {
		m.violate("cannot read the slots' effects: %v", err)
		return m
	}
	for _, id := range ids {
		switch n := effects[id]; {
		case n == 0:
			m.Lost++
			m.violate("slot %s: no effect (lost; %s)", id, slotState(ctx, w, mode, id))
		case n > 1:
			m.Duplicates += n - 1
			m.violate("slot %s: the effect happened %d times", id, n)
		}
	}
	return m
}

// slotState describes what the store recorded of a slot, for a violation.
func slotState(ctx context.Context, w *workerEnv, mode, id string) string {
	r, err := w.scheduleStore().Slot(ctx, schedJob(w, mode), id)
	switch {
	case errors.Is(err, schedule.ErrNotFound):
		return "no record"
	case err != nil:
		return "record unreadable: " + err.Error()
	}
	s := fmt.Sprintf("record %s after %d attempts on %s", r.State, r.Attempts, r.Node)
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}
