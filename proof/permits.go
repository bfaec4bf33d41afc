package proof

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

func init() {
	register(&workload{
		name:     "permits",
		summary:  "callers under pauses take, hold and release concurrency permits on one key; no more holders than permits at any moment",
		supports: notOnEtcd("concurrency permits"),
		setup:    ledgerSetup,
		worker:   bothModes(permitLoops),
		check:    permitCheck,
	})
}

// permitLimit is the number of permits on the workload's key; every worker
// runs permitHolders loops per mode, so the key is always contended.
const (
	permitLimit   = 2
	permitHolders = 2
)

// permitLoops runs permitHolders holders of mode side by side.
func permitLoops(ctx context.Context, w *workerEnv, mode string) error {
	var wg sync.WaitGroup
	errs := make([]error, permitHolders)
	for i := range permitHolders {
		rec := w.rec.sub("/p" + strconv.Itoa(i))
		wg.Go(func() { errs[i] = permitLoop(ctx, w, rec, mode, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// permitLoop takes a permit (failing fast when every permit is held),
// holds it for one to three think times, and releases it. Each acquire's
// input is its number in the loop; its release carries the same number.
func permitLoop(ctx context.Context, w *workerEnv, rec *Recorder, mode string, i int) error {
	c, err := ratelimit.NewConcurrency(w.limitStore(), ratelimit.ConcurrencyLimit{
		Name: "proof-permits", Permits: permitLimit, TTL: w.spec.TTL,
	}, nil)
	if err != nil {
		return err
	}
	key := w.spec.Prefix + "pm-" + mode
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index*permitHolders+i)))
	think := max(w.spec.Think, time.Millisecond)
	for n := 0; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		in := strconv.Itoa(n)
		p := rec.Invoke(mode, "acquire", key, in, 0)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var release func(context.Context) error
		var f uint64
		if mode == Guarded {
			var pm *ratelimit.Permit
			pm, err = c.TryAcquire(octx, key)
			if err == nil {
				f, release = pm.Fence(), pm.Release
			}
		} else {
			release, err = naiveAcquire(octx, w, key, rec.proc+"/"+in)
		}
		cancel()
		p.End("", f, err)
		if err != nil {
			w.sleep(ctx, time.Duration(rng.Int64N(int64(think/4)+1)))
			continue
		}
		w.sleep(ctx, think+time.Duration(rng.Int64N(int64(2*think))))
		r := rec.Invoke(mode, "release", key, in, f)
		octx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = release(octx)
		cancel()
		r.End("", f, err)
	}
	return nil
}

// naiveAcquire is the control: count the permits held on key, then, if
// one is free, record one for id that expires after the TTL (read, then
// write). The returned function releases it.
func naiveAcquire(ctx context.Context, w *workerEnv, key, id string) (func(context.Context) error, error) {
	db := w.ledger.DB()
	now := time.Now().UnixNano()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM proof_permits WHERE run = ? AND key = ? AND until > ?`,
		w.spec.Prefix, key, now).Scan(&n); err != nil {
		return nil, err
	}
	if n >= permitLimit {
		return nil, &ratelimit.LimitedError{Key: key, Permits: permitLimit, InUse: n}
	}
	w.sleep(ctx, w.spec.Think/2)
	if _, err := db.ExecContext(ctx, `INSERT INTO proof_permits (run, key, id, until) VALUES (?, ?, ?, ?)`,
		w.spec.Prefix, key, id, now+int64(w.spec.TTL)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `DELETE FROM proof_permits WHERE run = ? AND id = ?`, w.spec.Prefix, id)
		return err
	}, nil
}

// permitCheck: a permit granted by an acquire that completed OK was
// certainly held from that completion until the earlier of its release's
// invocation and its TTL after the acquire's invocation (the store grants
// it at some moment in between, and it expires a TTL after that). At no
// moment may more than permitLimit permits be certainly held. Acquires of
// unknown outcome may hold a permit too, but cannot be counted for sure.
func permitCheck(_ context.Context, _ *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	acq := h.Select(mode, "acquire")
	m.countOps(acq)
	released := map[string]int64{} // proc/in → release invocation
	for _, op := range h.Select(mode, "release") {
		released[op.Proc+"/"+op.In] = op.Invoke
	}
	type edge struct {
		t     int64
		delta int
	}
	var edges []edge
	margin := int64(time.Millisecond) // for reading the clock
	for _, op := range acq {
		if op.Status != OK {
			continue
		}
		end := op.Invoke + int64(ri.ttl) - margin
		if r, ok := released[op.Proc+"/"+op.In]; ok {
			end = min(end, r)
		}
		if end > op.Complete {
			edges = append(edges, edge{op.Complete, 1}, edge{end, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same moment
	})
	held, worst := 0, 0
	for _, e := range edges {
		held += e.delta
		if e.delta > 0 && held > permitLimit {
			m.violate("%d permits held at once at %s, limit %d", held,
				time.Unix(0, e.t).Format("15:04:05.000"), permitLimit)
			worst = max(worst, held)
		}
	}
	if worst > 0 {
		m.StaleAdmitted = worst - permitLimit
	}
	return m
}
