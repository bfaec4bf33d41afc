package proof

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

func init() {
	register(&workload{
		name:    "election",
		summary: "workers campaign in one election and, while leading, increment a counter several times per term through the store's holder check; paused and killed leaders are replaced, and a leader that wakes after its term never writes (final counter = acknowledged increments, terms' fences increase in commit order, one leader at a time, and a new leader soon after a term ends: within a TTL and a few hand-offs of a resignation, or of the leader going down plus a TTL)",
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
	var fence atomic.Uint64 // the term's, while it lasts
	store := recordRenewals(w.env.Leases, w.rec, mode, electionKey(w, mode), &fence)
	e, err := election.New(store, electionName(w, mode), &election.Options{
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
		fence.Store(l.Fence())
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

// recordRenewals returns s, through which a term's keep-alive renews key:
// each renewal of key is recorded as a "renew" of the term's fence whose
// output is its validity (half the TTL from its send, as the lease-counter
// records its own), so that the lease's history judges the whole of each
// term, not only its first TTL. The store's queue, wake-ups and hand-over
// stay as they are.
func recordRenewals(s lease.Store, rec *Recorder, mode, key string, fence *atomic.Uint64) lease.Store {
	r := renewRecorder{Store: s, rec: rec, mode: mode, key: key, fence: fence}
	q, queued := s.(leasedriver.Queuer)
	wk, wakes := s.(leasedriver.Waker)
	if !queued || !wakes {
		return r
	}
	rq := renewRecorderQueued{renewRecorder: r, q: q, wk: wk}
	if h, ok := s.(leasedriver.Handover); ok {
		return renewRecorderHandover{renewRecorderQueued: rq, h: h}
	}
	return rq
}

type renewRecorder struct {
	lease.Store
	rec       *Recorder
	mode, key string
	fence     *atomic.Uint64
}

func (r renewRecorder) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	return leasedriver.AcquireAs(ctx, r.Store, key, token, ttl, holder)
}

func (r renewRecorder) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if key != r.key {
		return r.Store.Renew(ctx, key, token, ttl)
	}
	p := r.rec.Invoke(r.mode, "renew", key, "", r.fence.Load())
	sent := time.Now()
	g, err := r.Store.Renew(ctx, key, token, ttl)
	if err != nil {
		p.End("", r.fence.Load(), err)
		return g, err
	}
	p.OK(strconv.FormatInt(sent.Add(ttl/2).UnixNano(), 10), g.Fence)
	return g, nil
}

type renewRecorderQueued struct {
	renewRecorder
	q  leasedriver.Queuer
	wk leasedriver.Waker
}

func (r renewRecorderQueued) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	return r.q.AcquireQueued(ctx, key, token, ttl, holder, stay)
}

func (r renewRecorderQueued) Leave(ctx context.Context, key, token string) error {
	return r.q.Leave(ctx, key, token)
}

func (r renewRecorderQueued) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	return r.wk.Watch(ctx, key, waiter)
}

type renewRecorderHandover struct {
	renewRecorderQueued
	h leasedriver.Handover
}

func (r renewRecorderHandover) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	return r.h.AcquireHandover(ctx, key, token, ttl, holder, stay, attempt)
}

func electionCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	m := writesAndGrants(ri, h, mode)
	lin := counterCheckKey(ctx, w, ri, h, mode, electionKey(w, mode), 0, true, &m)
	m.Linearizable = &lin
	if mode == Guarded {
		electionLiveness(ri, h, mode, w.kind, &m)
	}
	return m
}

// electionLiveness: once a term ends, the next leader is granted within a
// bound. A term ends when its leader resigns (the resignation's
// completion) or goes down (killed, or paused or its connections held for
// a TTL or longer: the term ends on the store at most a TTL after its last
// renewal, so at the moment it went down plus a TTL). The next grant must
// come within an allowance of that end: a TTL (a waiter's place left by a
// campaigner that went down, and on etcd the whole seconds of its leases)
// and twenty times the median hand-off the run measured after a
// resignation (a tenth of a TTL if it measured none), or twice the longest
// such hand-off (other than the term's own) if that is more, since a
// machine so busy that a clean hand-off took that long is as slow after a
// death. A hand-off is timed to the grant's earliest effect: the time its
// worker was down before recording it does not count. Plus three times the
// time the machine stalled the nemesis's own clock in the window (a loaded
// machine delays every process alike), plus the time in the window in which no other worker could have
// taken over (every other one was down, or a fault stopped them all, or a
// stopped worker may have held what all of them need: see blocking). A
// term end whose window reaches past the run's end is not judged; see
// successor for when a grant counts.
func electionLiveness(ri *runInfo, h *History, mode string, kind storeurl.Kind, m *ModeResult) {
	if ri.workers < 2 {
		return
	}
	var grants []Op
	type resignation struct{ invoke, complete int64 }
	resigned := map[string]resignation{} // proc and fence
	for _, op := range h.Select(mode, "") {
		switch {
		case op.F == "acquire" && op.Status == OK && op.Complete > 0:
			grants = append(grants, op)
		case op.F == "release":
			r := resignation{invoke: op.Invoke}
			if op.Status == OK {
				r.complete = op.Complete
			}
			resigned[op.Proc+"#"+strconv.FormatUint(op.Fence, 10)] = r
		}
	}
	slices.SortFunc(grants, func(a, b Op) int { return cmp.Compare(a.Complete, b.Complete) })
	next := func(after int64) (Op, bool) {
		i := sort.Search(len(grants), func(i int) bool { return grants[i].Complete > after })
		if i == len(grants) {
			return Op{}, false
		}
		return grants[i], true
	}
	// leading reports whether slot held a term at t.
	leading := func(slot int, t int64) bool {
		for _, g := range grants {
			if g.Complete > t {
				break
			}
			if slotOf(g.Proc) != slot {
				continue
			}
			r, ok := resigned[g.Proc+"#"+strconv.FormatUint(g.Fence, 10)]
			if n, more := next(g.Complete); (!ok || r.invoke > t) && (!more || n.Complete > t) {
				return true
			}
		}
		return false
	}
	downs := blocking(ri.downs, h, mode, kind, leading)
	var handoffs []time.Duration
	// The two longest hand-offs, and the resignation of the longest: a
	// term's own hand-off does not widen the allowance it is judged by.
	var longest, second time.Duration
	longestOf := ""
	for k, r := range resigned {
		if r.complete == 0 {
			continue
		}
		if g, ok := next(r.complete); ok {
			d := max(time.Duration(earliestGrant(g, downs)-r.complete), 0)
			handoffs = append(handoffs, d)
			switch {
			case d > longest:
				longest, second, longestOf = d, longest, k
			case d > second:
				second = d
			}
		}
	}
	median := ri.ttl / 10 // when no resignation was followed by a grant
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		median = handoffs[(len(handoffs)-1)/2]
	}
	for _, g := range grants {
		slot := slotOf(g.Proc)
		key := g.Proc + "#" + strconv.FormatUint(g.Fence, 10)
		r, didResign := resigned[key]
		other := longest
		if key == longestOf {
			other = second
		}
		base := ri.ttl + max(20*median, 2*other)
		// The term's end: its leader going down before it resigned, or
		// its resignation.
		var from, end time.Time
		how := ""
		for _, d := range downs {
			if d.slot == slot && d.from.UnixNano() >= g.Complete && (!didResign || d.from.UnixNano() < r.invoke) && (d.kind == "kill" || d.to.Sub(d.from) >= ri.ttl) {
				from, end, how = d.from, d.from.Add(ri.ttl), "went down"
				break
			}
		}
		if how == "" {
			if !didResign || r.complete == 0 {
				continue // ended otherwise (a fault cut it off), or not at all
			}
			from, end, how = time.Unix(0, r.complete), time.Unix(0, r.complete), "resigned"
		}
		if succ, ok := next(g.Complete); ok && succ.Complete < from.UnixNano() {
			continue // the term had passed on before its leader went down
		}
		// The allowance grows by the time the machine stalled and the time
		// no other worker could take over, within the window it spans.
		allowFrom := func(end time.Time) time.Duration {
			allow := base
			for range 20 {
				a := base + 3*ri.stalled(from, end.Add(allow)) + allDown(downs, ri.workers, slot, from, end.Add(allow))
				if a == allow {
					break
				}
				allow = a
			}
			return allow
		}
		why, allow, late, took := successor(ri, h.Select(mode, "acquire"), downs, end, allowFrom)
		if took >= 0 {
			if m.Succession == nil {
				m.Succession = &Succession{}
			}
			m.Succession.add(how, took, allow)
		}
		if late {
			m.violate("no new leader within %v of the end of %s's term (fence %d; it %s at +%v; TTL %v); %s",
				allow.Round(time.Millisecond), g.Proc, g.Fence, how, from.Sub(ri.start).Round(time.Millisecond), ri.ttl, why)
		}
	}
}

// successor reports whether no grant among acquires took effect within
// allowFrom(end) of end, and says when the first one after end did, and
// the allowance it judged by. A grant takes effect between its invocation
// and its completion, and its completion is late by the time its worker
// was down in between (granted, then paused before it could record it),
// so it counts from its completion minus that time.
//
// An acquire whose outcome is unknown (its worker was killed, or told to
// stop at the run's end) may have been granted without the history knowing,
// but only once its worker was last up (a worker that ran on would have
// recorded the grant), or a TTL before. If that can fall in the window,
// the worker may have led until it was killed, so its term ended at most a
// TTL after its death: the window moves there, and a grant must follow
// within the allowance of that. One that may have been granted before the
// workers were told to stop, its worker alive then, leaves nothing to
// judge.
//
// When a grant came in time, took is how long after the term's end (moved
// as above) the first one did, at the earliest; took is -1 when the term's
// end was not judged or no grant came in time.
func successor(ri *runInfo, acquires []Op, downs []downSpan, end time.Time, allowFrom func(end time.Time) time.Duration) (why string, allow time.Duration, late bool, took time.Duration) {
	termEnd := end
	for range len(acquires) + 1 {
		allow = allowFrom(end)
		deadline := end.Add(allow)
		if deadline.After(ri.stopping) {
			return "", allow, false, -1
		}
		first := int64(0)
		for _, o := range acquires {
			if o.Status == OK && o.Complete > termEnd.UnixNano() {
				if e := earliestGrant(o, downs); first == 0 || e < first {
					first = e
				}
			}
		}
		if first != 0 && first <= deadline.UnixNano() {
			return "", allow, false, max(time.Duration(first-end.UnixNano()), 0)
		}
		moved := end
		for _, o := range acquires {
			slot := slotOf(o.Proc)
			switch {
			case o.Status == Unknown:
				last, killed := ri.stopping, false
				for _, d := range downs {
					if d.slot == slot && d.kind == "kill" && d.from.UnixNano() >= o.Invoke {
						last, killed = d.from, true
						break
					}
				}
				up := last
				for again := true; again; {
					again = false
					for _, d := range downs {
						if d.slot == slot && d.from.Before(up) && !d.to.Before(up.Add(-time.Millisecond)) {
							up, again = d.from, true
						}
					}
				}
				if max(o.Invoke, up.Add(-ri.ttl).UnixNano()) > deadline.UnixNano() || last.Before(end) {
					continue // could not have been granted in the window
				}
				if !killed {
					return "", allow, false, -1
				}
				if e := last.Add(ri.ttl); e.After(moved) {
					moved = e
				}
			}
		}
		if moved.After(end) {
			end = moved // a killed worker may have led until then
			continue
		}
		if first == 0 {
			return "none was granted before the run ended", allow, true, -1
		}
		return "the next was granted at the earliest " + time.Duration(first-termEnd.UnixNano()).Round(time.Millisecond).String() + " after the term ended", allow, true, -1
	}
	return "", 0, false, -1
}

// earliestGrant is when a granted acquire took effect at the earliest: its
// completion, less the time its worker was down since its invocation
// (granted, then paused or cut off before it could record it), and not
// before its invocation.
func earliestGrant(o Op, downs []downSpan) int64 {
	return max(o.Invoke, o.Complete-int64(downWithin(downs, slotOf(o.Proc), time.Unix(0, o.Invoke), time.Unix(0, o.Complete))))
}

// downWithin returns how long, within [from, to], slot was down (or a fault
// stopped every worker).
func downWithin(spans []downSpan, slot int, from, to time.Time) time.Duration {
	var mine []downSpan
	for _, s := range spans {
		if s.slot == slot || s.slot == allSlots {
			mine = append(mine, downSpan{slot: 0, from: s.from, to: s.to})
		}
	}
	return allDown(mine, 1, -1, from, to)
}

// blocking returns downs with, for each worker stopped while it may have
// held what every worker needs, a span of the same time that stops them
// all:
//   - a worker paused or cut off in the middle of a read or a write of the
//     counter, on SQLite (its transaction holds the whole file: the
//     workload's SQLite transactions take the write lock) or PostgreSQL
//     (its transaction may hold the lease row's lock, as CheckHolder's does
//     until the guarded write commits, and no grant of the key goes
//     through meanwhile);
//   - on SQLite, a leader paused: its term's keep-alive renews in write
//     transactions that the history does not record, and one caught by
//     the pause holds the file until the leader resumes.
//
// A grant or a waiter's attempt is one short statement or transaction of
// the store, not judged as held. A killed worker holds nothing: its file
// locks and its server session end with it.
func blocking(downs []downSpan, h *History, mode string, kind storeurl.Kind, leading func(slot int, t int64) bool) []downSpan {
	out := slices.Clone(downs)
	ops := h.Select(mode, "")
	for _, d := range downs {
		if d.slot == allSlots || d.kind == "kill" || kind != storeurl.SQLite && kind != storeurl.Postgres {
			continue
		}
		from := d.from.UnixNano()
		stops := slices.ContainsFunc(ops, func(op Op) bool {
			return (op.F == "read" || op.F == "write") && slotOf(op.Proc) == d.slot && op.Invoke < from && (op.Complete == 0 || op.Complete > from)
		}) || kind == storeurl.SQLite && d.kind == "pause" && leading(d.slot, from)
		if stops {
			out = append(out, downSpan{slot: allSlots, kind: d.kind, from: d.from, to: d.to})
		}
	}
	return out
}
