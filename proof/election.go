package proof

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(&workload{
		name:    "election",
		summary: "workers campaign in one election and, while leading, increment a counter several times per term through the store's holder check; paused and killed leaders are replaced, and a leader that wakes after its term never writes (final counter = acknowledged increments, terms' fences increase in commit order, one leader at a time)",
		supports: func(k storeurl.Kind) string {
			if k == storeurl.Memory {
				return "the memory store's workers are goroutines of one process: a pause stops a leader's work but not its term's keep-alive, so no term ends under a pause"
			}
			return ""
		},
		setup:  counterSetup,
		worker: electionWorker,
		check:  electionCheck,
		kills:  true,
		aim:    true,
		aimAt:  []string{"grant", "write"},
		leaseKeys: func(w *workerEnv) []string {
			return []string{electionKey(w, Guarded), electionKey(w, Control)}
		},
	})
}

// termWrites is how many increments a leader makes per term before it
// resigns.
const termWrites = 3

// electionName names mode's election; its lease key is electionKey.
func electionName(w *workerEnv, mode string) string { return w.env.Key("el/" + mode) }

func electionKey(w *workerEnv, mode string) string {
	return election.KeyPrefix + electionName(w, mode)
}

func electionWorker(ctx context.Context, w *workerEnv) error {
	errs := make(chan error, 2)
	for _, mode := range []string{Guarded, Control} {
		go func() { errs <- electionLoop(ctx, w, mode) }()
	}
	return errors.Join(<-errs, <-errs)
}

// electionLoop campaigns, and while leading reads the counter, thinks and
// writes it plus one (through the guard, or plainly in the control),
// termWrites times, then resigns. The term's grant is recorded as an
// "acquire" (with the term's validity end), each increment as a "read"
// and a "write", the resignation as a "release": the lease-counter's
// checks judge them, with several writes per term.
func electionLoop(ctx context.Context, w *workerEnv, mode string) error {
	ttl := w.spec.TTL
	e, err := election.New(w.env.Leases, electionName(w, mode), &election.Options{
		TTL:    ttl,
		Holder: "proof worker",
		Lease:  &lease.Options{RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, Attempts: 1},
	})
	if err != nil {
		return err
	}
	key := e.Key()
	res := key // in the lease key's hash slot on Redis Cluster
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "acquire", key, "", 0)
		cctx, cancel := context.WithTimeout(ctx, 20*ttl)
		t, err := e.Campaign(cctx)
		cancel()
		if err != nil {
			p.End("", 0, err)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		l := t.Lease()
		p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
		// The steps of a term finish even when the worker is told to
		// stop, so that a stop leaves no write unknown.
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		for range termWrites {
			w.gate.wait(ctx)
			rp := w.rec.Invoke(mode, "read", res, "", l.Fence())
			v, err := counterRead(octx, w, res)
			rp.End(v, l.Fence(), err)
			if err != nil {
				break
			}
			n, _ := parseCount(v)
			w.sleep(ctx, w.spec.Think)
			// The write goes ahead whatever the term's state: the guard
			// must refuse it for a leader whose term ended.
			nv := formatCount(n+1, l.Fence())
			wp := w.rec.Invoke(mode, "write", res, nv, l.Fence())
			err = counterWrite(octx, w, mode, l, res, nv, true)
			wp.End(nv, l.Fence(), err)
		}
		relp := w.rec.Invoke(mode, "release", key, "", l.Fence())
		relp.End("", l.Fence(), t.Resign(octx))
		ocancel()
	}
	return nil
}

func electionCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	m := writesAndGrants(ri, h, mode)
	lin := counterCheckKey(ctx, w, ri, h, mode, electionKey(w, mode), 0, true, &m)
	m.Linearizable = &lin
	return m
}
