package proof

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(&workload{
		name:    "fence-floor",
		summary: "workers take leases, let every other grant's fence run an hour ahead of the clock (as a clock that steps back later leaves it), release, and have the store reclaim what the ended lease left (its sweep, or its keys' expiry) before the key is taken again: every grant's fence is above every fence the key had, although nothing of the key is kept (the store's fence floor carries it); the control drops the records with no floor and shows fences going back",
		supports: func(k storeurl.Kind) string {
			if k == storeurl.Etcd {
				return "a fence on etcd is the revision that created the lock: it never goes back, and the store keeps no floor to check"
			}
			return ""
		},
		worker: floorWorker,
		check:  floorCheck,
	})
}

// floorAhead is how far a raised fence is put ahead of the one granted:
// an hour of a clock in microseconds.
const floorAhead = uint64(time.Hour / time.Microsecond)

// floorKey names lease key i of mode.
func floorKey(w *workerEnv, mode string, i int) string {
	return w.env.Key("ff/" + mode + "/" + strconv.Itoa(i))
}

func floorWorker(ctx context.Context, w *workerEnv) error {
	return perKey(ctx, w, floorKey, floorLoop)
}

// errNotRaised: the lease ended before its fence could be raised.
var errNotRaised = errors.New("the lease was no longer held")

// floorLoop: acquire the key; every other tenure, raise its fence an hour
// ahead (recorded as a "raise" with that fence); release; then have the
// store reclaim the ended lease (in the control: drop its record, keeping
// no floor). The next acquire must still get a greater fence.
func floorLoop(ctx context.Context, w *workerEnv, mode, key string) error {
	lk, err := lease.New(w.env.Leases, &lease.Options{RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		return err
	}
	ttl := w.spec.TTL
	for n := 0; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "acquire", key, "", 0)
		actx, cancel := context.WithTimeout(ctx, 20*ttl)
		l, err := lk.Acquire(actx, key, ttl)
		cancel()
		if err != nil {
			p.End("", 0, err)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if n%2 == 0 {
			f := l.Fence() + floorAhead
			rp := w.rec.Invoke(mode, "raise", key, "", f)
			ok, err := w.env.RaiseFence(octx, key, l.Token().Reveal(), f, mode == Control)
			if err == nil && !ok {
				err = errNotRaised
			}
			rp.End("", f, err)
		}
		w.sleep(ctx, w.spec.Think)
		relp := w.rec.Invoke(mode, "release", key, "", l.Fence())
		relp.End("", l.Fence(), l.Release(octx))
		cp := w.rec.Invoke(mode, "reclaim", key, "", 0)
		if mode == Guarded {
			cp.End("", 0, w.env.Reclaim(octx, []string{key}))
		} else {
			_, err := w.env.DropLease(octx, []string{key})
			cp.End("", 0, err)
		}
		ocancel()
	}
	return nil
}

// floorCheck: per key, every grant's fence is above the fences the key had
// (granted, or raised) before the grant was requested.
func floorCheck(_ context.Context, w *workerEnv, _ *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	acq := h.Select(mode, "acquire")
	m.countOps(acq)
	byKey := map[string][]Op{}
	for _, op := range acq {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, op := range h.Select(mode, "raise") {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, ops := range byKey {
		grantOrder(ops, &m)
	}
	return m
}
