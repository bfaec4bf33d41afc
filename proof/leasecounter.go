package proof

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(&workload{
		name:     "lease-counter",
		summary:  "workers increment a counter under a lease through the store's holder check; a paused holder's late write is refused even before the next holder writes (fences increase in commit order, final counter = acknowledged increments), and fences keep increasing when the store forgets ended leases",
		supports: func(storeurl.Kind) string { return "" },
		setup:    counterSetup,
		worker:   counterWorker,
		check:    counterCheck,
		aim:      true,
		aimAt:    []string{"grant", "write"},
		leaseKeys: func(w *workerEnv) []string {
			var keys []string
			for _, mode := range []string{Guarded, Control} {
				for i := range counterKeys(w.spec) {
					keys = append(keys, counterKey(w, mode, i))
				}
				keys = append(keys, endedKey(w, mode))
			}
			return keys
		},
	})
}

const (
	sqliteRegister = "tenure_proof_register"
	pgRegister     = "tenure_lab.tenure_proof_register"
)

func counterSetup(ctx context.Context, w *workerEnv) error {
	switch w.kind {
	case storeurl.SQLite:
		_, err := w.env.SQLite.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+sqliteRegister+` (name TEXT PRIMARY KEY, value TEXT NOT NULL)`)
		return err
	case storeurl.Postgres:
		_, err := w.pg.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+pgRegister+` (name text PRIMARY KEY, value text NOT NULL)`)
		return err
	}
	return nil
}

// counterKeys is the number of counters per mode: spec.Keys, at least 1.
func counterKeys(spec workerSpec) int { return max(spec.Keys, 1) }

// counterKey names counter i of mode (and its lease). The first counter
// keeps the name it had when there was only one.
func counterKey(w *workerEnv, mode string, i int) string {
	if i == 0 {
		return w.env.Key("lc/" + mode)
	}
	return w.env.Key("lc/" + mode + "/" + strconv.Itoa(i))
}

// endedKey names mode's key of short tenures: taken and released again
// between the counter's rounds, so that it is free most of the time and
// the forget fault finds its lease ended.
func endedKey(w *workerEnv, mode string) string { return w.env.Key("lc/" + mode + "/ended") }

func counterWorker(ctx context.Context, w *workerEnv) error {
	return perKey(ctx, w, counterKey, counterLoop)
}

// perKey runs loop on every key of both modes (counterKeys of them per
// mode, named by key) at once, and returns when all have returned.
func perKey(ctx context.Context, w *workerEnv, key func(w *workerEnv, mode string, i int) string,
	loop func(ctx context.Context, w *workerEnv, mode, key string) error) error {
	var wg sync.WaitGroup
	n := counterKeys(w.spec)
	errs := make([]error, 2*n)
	for i, mode := range []string{Guarded, Control} {
		for k := range n {
			wg.Go(func() { errs[i*n+k] = loop(ctx, w, mode, key(w, mode, k)) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// counterLoop: acquire the lease, read the counter, think, renew the
// lease, write the counter plus one (through the guard, or plainly in the
// control), release.
//
// The acquire's and the renewal's completions carry the lease's validity
// end (Unix nanoseconds, before which the store cannot have let it
// expire) and the release is recorded, for the lease's own
// linearizability check.
func counterLoop(ctx context.Context, w *workerEnv, mode, key string) error {
	lk, err := lease.New(w.env.Leases, &lease.Options{RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		return err
	}
	ttl := w.spec.TTL
	// The resource is named like the lease key, so that on Redis Cluster
	// the holder check and the write share a hash slot.
	res := key
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "acquire", key, "", 0)
		actx, cancel := context.WithTimeout(ctx, 20*ttl)
		l, err := lk.Acquire(actx, key, ttl)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				p.End("", 0, err) // told to stop while waiting
				return nil
			}
			p.End("", 0, err)
			continue
		}
		p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
		w.gate.wait(ctx)
		// Steps after the acquire finish even when the worker is told to
		// stop, so that a stop leaves no write unknown.
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		rp := w.rec.Invoke(mode, "read", res, "", l.Fence())
		v, err := counterRead(octx, w, res)
		rp.End(v, l.Fence(), err)
		if err == nil {
			n, _ := parseCount(v)
			w.sleep(ctx, w.spec.Think)
			// Renew, as a holder with more to do would, through the
			// store itself (the Locker would also refuse a renewal the
			// store answers with another tenure's fence, and hide it). The
			// write below goes ahead whatever the answer: the guard must
			// refuse it for a holder that lost the lease.
			np := w.rec.Invoke(mode, "renew", key, "", l.Fence())
			sent := time.Now()
			if _, rerr := w.env.Leases.Renew(octx, key, l.Token().Reveal(), ttl); rerr != nil {
				np.End("", l.Fence(), rerr)
			} else {
				// Valid for half the TTL from the send: well inside what
				// the store promises, whatever the clocks' drift.
				np.OK(strconv.FormatInt(sent.Add(ttl/2).UnixNano(), 10), l.Fence())
			}
			nv := formatCount(n+1, l.Fence())
			wp := w.rec.Invoke(mode, "write", res, nv, l.Fence())
			err = counterWrite(octx, w, mode, l, res, nv, false)
			wp.End(nv, l.Fence(), err)
		}
		relp := w.rec.Invoke(mode, "release", key, "", l.Fence())
		relp.End("", l.Fence(), l.Release(octx))
		shortTenure(octx, w, lk, mode)
		ocancel()
	}
	return nil
}

// shortTenure takes mode's endedKey if it is free and releases it at
// once; its grants' fences must increase, also when the store forgot the
// ended lease in between.
func shortTenure(ctx context.Context, w *workerEnv, lk *lease.Locker, mode string) {
	key := endedKey(w, mode)
	// "take" and "drop", not "acquire" and "release": the nemesis aims
	// at the counter's holders only.
	p := w.rec.Invoke(mode, "take", key, "", 0)
	l, err := lk.TryAcquire(ctx, key, w.spec.TTL)
	if err != nil {
		p.End("", 0, err)
		return
	}
	p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
	rp := w.rec.Invoke(mode, "drop", key, "", l.Fence())
	rp.End("", l.Fence(), l.Release(ctx))
}

func counterRead(ctx context.Context, w *workerEnv, res string) (string, error) {
	var v string
	var err error
	switch w.kind {
	case storeurl.SQLite:
		err = w.env.SQLite.DB().QueryRowContext(ctx, `SELECT value FROM `+sqliteRegister+` WHERE name = ?`, res).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	case storeurl.Postgres:
		err = w.pg.QueryRow(ctx, `SELECT value FROM `+pgRegister+` WHERE name = $1`, res).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	default:
		v, err = w.env.Resource.Read(ctx, res)
	}
	return v, err
}

// counterWrite writes v. Guarded: SQL stores check the holder and admit
// the fence in the transaction of the write (CheckHolder, and Admit, or
// AdmitAtLeast when a tenure writes several times: atLeast); Redis and
// memory use HolderSet; etcd a txn with Compare. Control: a plain write.
func counterWrite(ctx context.Context, w *workerEnv, mode string, l *lease.Lease, res, v string, atLeast bool) error {
	guarded := mode == Guarded
	switch w.kind {
	case storeurl.SQLite:
		s := w.env.SQLite
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if guarded {
			if err := s.Tx(tx).CheckHolder(ctx, l); err != nil {
				return err
			}
			admit := s.Tx(tx).Admit
			if atLeast {
				admit = s.Tx(tx).AdmitAtLeast
			}
			if err := admit(ctx, res, l.Fence()); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+sqliteRegister+` (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, res, v); err != nil {
			return err
		}
		return tx.Commit()
	case storeurl.Postgres:
		return pgx.BeginFunc(ctx, w.pg, func(tx pgx.Tx) error {
			if guarded {
				if err := w.pgCheckHolder(ctx, tx, l); err != nil {
					return err
				}
				if err := w.pgAdmit(ctx, tx, res, l.Fence(), atLeast); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+pgRegister+` (name, value) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET value = excluded.value`, res, v)
			return err
		})
	}
	if guarded {
		return w.env.Resource.HolderWrite(ctx, l, res, v)
	}
	return w.env.Resource.PlainWrite(ctx, res, v)
}

func counterCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	m := writesAndGrants(ri, h, mode)
	lin := true
	for k := range counterKeys(w.spec) {
		key := counterKey(w, mode, k)
		if !counterCheckKey(ctx, w, ri, h, mode, key, k, false, &m) {
			lin = false
		}
	}
	grantOrder(byKey(h, mode, "take", endedKey(w, mode)), &m)
	m.Linearizable = &lin
	return m
}

// writesAndGrants starts the judgement of a counter under leases: the
// writes counted, and the acquires that failed while faults ran counted
// as errors.
func writesAndGrants(ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	m.countOps(h.Select(mode, "write"))
	for _, op := range h.Select(mode, "acquire") {
		if op.Status != OK && op.Invoke < ri.faultsEnd.UnixNano() {
			m.Errors["acquire:"+op.Err]++
		}
	}
	return m
}

// byKey returns the operations of mode with function f on key.
func byKey(h *History, mode, f, key string) []Op {
	var out []Op
	for _, op := range h.Select(mode, f) {
		if op.Key == key {
			out = append(out, op)
		}
	}
	return out
}

// counterCheckKey checks counter number k (named key) of mode into m and
// reports whether its histories (the counter's and the lease's) are
// linearizable. perTerm: a tenure writes several times, so consecutive
// values may carry one fence.
func counterCheckKey(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode, key string, k int, perTerm bool, m *ModeResult) bool {
	res := key
	writes, reads := byKey(h, mode, "write", res), byKey(h, mode, "read", res)
	acks, unknown := 0, 0
	for _, op := range writes {
		switch op.Status {
		case OK:
			acks++
		case Unknown:
			unknown++
		}
	}
	v, err := counterRead(ctx, w, res)
	if err != nil {
		m.violate("cannot read the final counter: %v", err)
		return false
	}
	final, _ := parseCount(v)
	if final < acks {
		m.Lost += acks - final
		m.violate("final counter %d, but %d increments were acknowledged: %d lost", final, acks, acks-final)
	}
	if final > acks+unknown {
		m.violate("final counter %d is above the %d acknowledged and %d indeterminate increments", final, acks, unknown)
	}
	// Each acknowledged write must have written a value nobody else
	// wrote, and fences must increase with the values (commit order).
	byValue := map[int][]uint64{}
	for _, op := range writes {
		if op.Status == OK {
			n, f := parseCount(op.In)
			byValue[n] = append(byValue[n], f)
		}
	}
	values := make([]int, 0, len(byValue))
	for n := range byValue {
		values = append(values, n)
	}
	sort.Ints(values)
	for _, n := range values {
		if fs := byValue[n]; len(fs) > 1 {
			m.StaleAdmitted += len(fs) - 1
			m.violate("%d acknowledged writes all wrote %d: %d were based on a stale read", len(fs), n, len(fs)-1)
		}
	}
	var last uint64
	for _, n := range values {
		f := slices.Min(byValue[n])
		if f < last || f == last && !perTerm {
			m.violate("fence went back in commit order: value %d has fence %d after fence %d", n, f, last)
		}
		last = max(last, slices.Max(byValue[n]))
	}
	olderFenceAdmitted(writes, m)
	acquires := byKey(h, mode, "acquire", key)
	admittedAfterTakeover(writes, acquires, m)
	grantOrder(acquires, m)
	name := ri.name + "-" + mode
	if k > 0 {
		name += "-" + strconv.Itoa(k)
	}
	ok, cerr := checkRegister(ri, name, reads, writes)
	if !ok {
		m.violate("the counter's history is not linearizable (visualization in %s)", ri.dir)
	} else if cerr != nil {
		m.Errors["check:"+cerr.Error()]++
	}
	lok, lerr := checkLease(ri, name+"-lease", acquires, byKey(h, mode, "renew", key), byKey(h, mode, "release", key))
	if !lok {
		m.violate("the lease's history is not linearizable: two holders at once or a fence that went back (visualization in %s)", ri.dir)
	} else if lerr != nil {
		m.Errors["check:"+lerr.Error()]++
	}
	return ok && lok
}

// grantOrder checks grants in real-time order into m: a grant requested
// after another one was granted must carry a greater fence, also across
// store restarts and the loss of ended leases' records.
func grantOrder(acquires []Op, m *ModeResult) {
	var grants []Op
	for _, op := range acquires {
		if op.Status == OK {
			grants = append(grants, op)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Complete < grants[j].Complete })
	var top uint64 // greatest fence of the grants completed so far
	j := 0
	byInvoke := slices.Clone(grants)
	sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
	for _, g := range byInvoke {
		for j < len(grants) && grants[j].Complete < g.Invoke {
			top = max(top, grants[j].Fence)
			j++
		}
		if g.Fence <= top {
			m.FenceRegressions++
			m.violate("fence went back: a grant requested after fence %d had been granted got fence %d", top, g.Fence)
		}
	}
}

// admittedAfterTakeover counts, into m, the acknowledged writes that were
// invoked after the lease had been granted to a newer holder (a grant with
// a greater fence had completed): what a holder check refuses, even
// before the newer holder has written anything.
func admittedAfterTakeover(writes, acquires []Op, m *ModeResult) {
	var grants []Op
	for _, op := range acquires {
		if op.Status == OK {
			grants = append(grants, op)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Complete < grants[j].Complete })
	// top[i] is the greatest fence of grants[:i+1].
	top := make([]uint64, len(grants))
	for i, g := range grants {
		top[i] = g.Fence
		if i > 0 {
			top[i] = max(top[i], top[i-1])
		}
	}
	for _, op := range writes {
		if op.Status != OK {
			continue
		}
		n := sort.Search(len(grants), func(i int) bool { return grants[i].Complete >= op.Invoke })
		if n > 0 && top[n-1] > op.Fence {
			m.StaleAdmitted++
			m.violate("a write by the holder of fence %d was admitted after the lease had been granted to fence %d", op.Fence, top[n-1])
		}
	}
}
