package proof

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

func init() {
	register(&workload{
		name:     "ratelimit",
		summary:  "concurrent callers under pauses ask a sliding-log limit for admission; admissions in any period never exceed the limit",
		supports: notOnEtcd("rate limits"),
		setup:    ledgerSetup,
		worker:   bothModes(limitLoop),
		check:    limitCheck,
	})
}

// limitRate is the limit's rate; its period is limitPeriod(ttl).
const limitRate = 10

func limitPeriod(ttl time.Duration) time.Duration { return 2 * ttl }

// limitLoop asks for one unit at a time, as fast as it is answered.
func limitLoop(ctx context.Context, w *workerEnv, mode string) error {
	period := limitPeriod(w.spec.TTL)
	l, err := ratelimit.New(w.limitStore(), ratelimit.SlidingLog, ratelimit.Limit{
		Name: "proof-" + fmt.Sprint(period.Microseconds()), Rate: limitRate, Period: period,
	}, nil)
	if err != nil {
		return err
	}
	key := w.spec.Prefix + "rl-" + mode
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index)))
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "allow", key, "", 0)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var allowed bool
		if mode == Guarded {
			var d ratelimit.Decision
			d, err = l.Allow(octx, key)
			allowed = d.Allowed
		} else {
			allowed, err = naiveAllow(octx, w, key, period)
		}
		cancel()
		if err == nil && !allowed {
			err = &ratelimit.LimitedError{}
		}
		p.End("", 0, err)
		w.sleep(ctx, time.Duration(rng.Int64N(int64(period/(4*limitRate)))))
	}
	return nil
}

// naiveAllow is the control: count the admissions of the last period,
// then record one if there is room (read, then write).
func naiveAllow(ctx context.Context, w *workerEnv, key string, period time.Duration) (bool, error) {
	db := w.ledger.DB()
	now := time.Now().UnixNano()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM proof_admissions WHERE run = ? AND key = ? AND t > ?`,
		w.spec.Prefix, key, now-int64(period)).Scan(&n); err != nil {
		return false, err
	}
	if n >= limitRate {
		return false, nil
	}
	w.sleep(ctx, w.spec.Think/2)
	_, err := db.ExecContext(ctx, `INSERT INTO proof_admissions (run, key, t) VALUES (?, ?, ?)`, w.spec.Prefix, key, now)
	return err == nil, err
}

// limitCheck: an admission was decided at some moment between its
// invocation and its completion. Any admissions that all lie within one
// interval shorter than the period were decided within one period: there
// may be at most limitRate of them. Indeterminate requests may have been
// admitted too, but cannot be counted against the limit for sure.
func limitCheck(_ context.Context, _ *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	ops := h.Select(mode, "allow")
	m.countOps(ops)
	var adm []Op
	for _, op := range ops {
		if op.Status == OK {
			adm = append(adm, op)
		}
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].Invoke < adm[j].Invoke })
	period := int64(limitPeriod(ri.ttl)) - int64(time.Millisecond) // a margin for clock reading
	worst := 0
	for i := range adm {
		var ends []int64
		for j := i; j < len(adm) && adm[j].Invoke < adm[i].Invoke+period; j++ {
			if adm[j].Complete < adm[i].Invoke+period {
				ends = append(ends, adm[j].Complete)
			}
		}
		if len(ends) > limitRate {
			worst = max(worst, len(ends))
			m.violate("%d admissions within %v (from %s), limit %d", len(ends), limitPeriod(ri.ttl),
				time.Unix(0, adm[i].Invoke).Format("15:04:05.000"), limitRate)
		}
	}
	if worst > 0 {
		m.StaleAdmitted = worst - limitRate // admissions above the bound in the worst period
	}
	return m
}
