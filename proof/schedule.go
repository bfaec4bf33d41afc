package proof

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

func init() {
	register(&workload{
		name:    "schedule",
		summary: "three scheduler nodes run a short-period job while nodes are paused, killed (SIGKILL) and restarted, a stalled attempt completes after its slot was taken over and completions are sent twice; each slot's effect happens exactly once, never under a claim that was taken over, and no slot in the window is lost",
		supports: func(k storeurl.Kind) string {
			if k == storeurl.Etcd {
				return "etcd keeps leases only; tenure does not offer schedules on it"
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
// control applies its effect with no completion check. A quarter of the
// completions are sent twice (a reply lost on the way back: the node
// cannot tell whether the first was applied). Next to the node, a stalled
// attempt of its own (staleSlots) claims guarded slots by hand.
func schedWorker(ctx context.Context, w *workerEnv) error {
	ttl := w.spec.TTL
	period := schedPeriod(ttl)
	s, err := schedule.New(w.scheduleStore(), &schedule.Options{
		Node: w.spec.Proc, PollInterval: period / 4, ClaimTTL: ttl, StopTimeout: time.Second,
	})
	if err != nil {
		return err
	}
	sched := lastSlot{schedule.Every(period), time.Unix(0, w.spec.End)}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index)))
	resend := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(4) == 0
	}
	for _, mode := range []string{Guarded, Control} {
		err := s.Add(schedule.Job{
			Name: schedJob(w, mode), Schedule: sched,
			Misfire: schedule.MisfireCatchUp, CatchUpWindow: time.Hour, CatchUpConcurrency: 4,
			Overlap: schedule.OverlapAllow,
			Retry:   schedule.Retry{Attempts: 10, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
			Run: func(ctx context.Context, slot *schedule.Slot) error {
				p := w.rec.Invoke(mode, "run", slot.ID, "", slot.Fence)
				w.sleep(ctx, w.spec.TTL/2) // a pause here outlasts the claim
				err := completeSlot(context.WithoutCancel(ctx), w, w.rec, mode, slot, 0, resend())
				p.End("", slot.Fence, err)
				return err
			},
		})
		if err != nil {
			return err
		}
	}
	var stale sync.WaitGroup
	stale.Go(func() { staleSlots(ctx, w, s, sched) })
	defer stale.Wait()
	err = s.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// completeSlot applies a slot's effect (schedEffect), recorded as a
// "complete" operation; seen is the greatest fence of the slot's claim
// the caller saw granted before it sent the completion (0: none newer
// than its own). With resend the completion is sent again after it was
// applied, as by a node whose reply was lost: the store must answer
// ErrCompleted and apply nothing.
func completeSlot(ctx context.Context, w *workerEnv, rec *Recorder, mode string, slot *schedule.Slot, seen uint64, resend bool) error {
	in := ""
	if seen > 0 {
		in = strconv.FormatUint(seen, 10)
	}
	p := rec.Invoke(mode, "complete", slot.ID, in, slot.Fence)
	err := schedEffect(ctx, w, mode, slot)
	if err == nil && resend {
		if err = schedEffect(ctx, w, mode, slot); errors.Is(err, schedule.ErrCompleted) {
			err = nil
		}
	}
	p.End("", slot.Fence, err)
	return err
}

// staleSlots is an attempt that stalls: it claims a guarded slot by hand
// (Scheduler.Claim, a claim nothing renews) as the slot comes due, and
// stalls past the claim's TTL until a node has taken the slot over. Half
// of its attempts then complete the slot, which the store must refuse:
// the new attempt's handler is still running and may complete it. The
// other half complete the slot first, while the claim is theirs, and then
// stall before recording the attempt's end: the node that takes the slot
// over must find it completed and apply nothing.
func staleSlots(ctx context.Context, w *workerEnv, s *schedule.Scheduler, sched schedule.Schedule) {
	rec := w.rec.sub("/stale")
	job := schedJob(w, Guarded)
	ttl, period := w.spec.TTL, schedPeriod(w.spec.TTL)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index)+1))
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		at := sched.Next(time.Now())
		if at.IsZero() {
			return
		}
		w.sleep(ctx, time.Until(at))
		slot, err := claimDue(ctx, s, job, at)
		if err == nil {
			staleSlot(context.WithoutCancel(ctx), ctx, w, s, rec, slot, ttl, rng.IntN(2) == 0)
		}
		w.sleep(ctx, time.Duration(rng.Int64N(int64(3*period))))
	}
}

// claimDue claims the slot at by hand, waiting while the store's clock
// says it is not yet due.
func claimDue(ctx context.Context, s *schedule.Scheduler, job string, at time.Time) (*schedule.Slot, error) {
	for range 10 {
		slot, err := s.Claim(ctx, job, at)
		var nd *schedule.NotDueError
		if !errors.As(err, &nd) {
			return slot, err
		}
		t := time.NewTimer(nd.Wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return nil, schedule.ErrNotDue
}

// staleSlot is one attempt of staleSlots; it waits for a takeover until
// run ends or a deadline passes (then it goes on as an attempt that was
// not taken over: its completion is refused if its claim has expired, and
// the slot is left to the nodes).
func staleSlot(ctx, run context.Context, w *workerEnv, s *schedule.Scheduler, rec *Recorder, slot *schedule.Slot, ttl time.Duration, completeFirst bool) {
	octx, cancel := context.WithTimeout(ctx, 10*ttl+10*time.Second)
	defer cancel()
	p := rec.Invoke(Guarded, "run", slot.ID, "", slot.Fence)
	var err error
	if completeFirst {
		err = completeSlot(octx, w, rec, Guarded, slot, 0, false)
	}
	w.sleep(run, ttl)
	claims, key := w.scheduleStore().Claims(), scheddriver.ClaimKey(slot.Job, slot.ID)
	var seen uint64
	for end := time.Now().Add(3*ttl + time.Second); run.Err() == nil && time.Now().Before(end); w.sleep(run, 2*time.Millisecond) {
		if in, err := claims.Inspect(octx, key); err == nil && in.Fence > slot.Fence {
			seen = in.Fence
			break
		}
	}
	if !completeFirst {
		err = completeSlot(octx, w, rec, Guarded, slot, seen, false)
	}
	// Only a completed slot's end is recorded: Finish records a failure
	// as final, and a refused completion leaves the slot to the nodes,
	// which take it over as a dead node's once the claim has expired.
	if err == nil {
		fp := rec.Invoke(Guarded, "finish", slot.ID, "", slot.Fence)
		_, ferr := s.Finish(octx, slot, nil)
		fp.End("", slot.Fence, ferr)
	}
	p.End("", slot.Fence, err)
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
	// No completion may succeed once the slot's claim was granted to a
	// newer attempt: seen by the completing attempt itself (In), or as a
	// run of that attempt begun before the completion was sent.
	runsOf := byKeyMap(runs)
	for _, op := range h.Select(mode, "complete") {
		if op.Status != OK {
			continue
		}
		if g, err := strconv.ParseUint(op.In, 10, 64); err == nil && g > op.Fence {
			m.StaleAdmitted++
			m.violate("slot %s: %s completed it under the claim with fence %d after it had seen the claim granted with fence %d", op.Key, op.Proc, op.Fence, g)
		} else if g, ok := takenOver(op, runsOf[op.Key]); ok {
			m.StaleAdmitted++
			m.violate("slot %s: %s completed it under the claim with fence %d after an attempt with fence %d had begun", op.Key, op.Proc, op.Fence, g)
		}
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
