package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// A slot's run is a fixed sequence of steps, each of which either lets the
// run go on or ends it with an outcome for the pending slot:
//
//	claim    take the slot's claim lease (held elsewhere: look again when it ends)
//	check    read the slot's record (final: drop it; retry not due: wait)
//	permit   a catch-up slot takes a catch-up permit (none free: look again)
//	gate     the overlap policy: take the job's run lease, wait for it, or
//	         record the slot skipped (OverlapSkip, an earlier slot's run was
//	         already running at this slot's time)
//	begin    record the attempt's start (Store.Begin)
//	run      call the handler (a panic or runtime.Goexit fails the attempt)
//	finish   end the run lease and permit, record done or failed (a claim
//	         lost under the handler makes the failure retried at once)
//
// A step that cannot decide (the store did not answer) ends the run with a
// look again later and writes nothing, so the record never says skipped or
// failed for a slot that should still run. Every lease the run took is
// released and every keep-alive stopped however the run ends.

// outcome is what a run leaves for its pending slot.
type outcome struct {
	final bool      // drop the slot: it is final (or superseded)
	at    time.Time // else look at it again at this time (store clock)
}

// slotRun is one attempt at a pending slot.
type slotRun struct {
	s *Scheduler
	// claimStepDone is set (under s.mu) once the claim step is over.
	claimStepDone bool
	js            *jobState
	j             Job
	p             *pendingSlot
	log           *slog.Logger

	// stop ends when the scheduler stops: no step starts or goes on
	// waiting after it.
	stop context.Context
	// ctx is the attempt's context: it ends at the stop deadline (the
	// handlers' context) and, with a cause wrapping lease.ErrLost, when a
	// lease of the attempt is lost. Once the claim is taken it is the
	// keep-alive group's context.
	ctx context.Context

	// ka keeps every lease of the attempt alive with one loop, from the
	// claim on.
	ka     *lease.Group
	claim  *lease.Lease
	leases []*lease.Lease // the catch-up permit and the run lease, in order taken

	begun, finished bool
	rec             Record
	handlerErr      error // the handler's error, also after runtime.Goexit
	out             outcome
	state           int // a slot state it recorded (slotDone, ...), or -1
}

// spanOutcome names what the attempt recorded, for its span.
func (r *slotRun) spanOutcome() string {
	if r.state < 0 {
		return "none"
	}
	return slotStates[r.state]
}

// catchUp reports whether the slot runs as a catch-up of a late slot.
func (r *slotRun) catchUp() bool { return r.p.late && r.j.Misfire == MisfireCatchUp }

// later is an outcome that looks at the slot again d after sent.
func later(sent time.Time, d time.Duration) outcome { return outcome{at: sent.Add(d)} }

// hold keeps l alive with the attempt's other leases, starting the
// attempt's keep-alive group with its first lease.
func (r *slotRun) hold(l *lease.Lease) *lease.Lease {
	if r.ka == nil {
		r.ka = r.s.locker.KeepAlive(r.ctx)
		r.ctx = r.ka.Context()
	}
	r.ka.Add(l)
	return l
}

// endLeases stops keeping the permit and the run lease alive and releases
// them, newest first.
func (r *slotRun) endLeases() {
	for i := len(r.leases) - 1; i >= 0; i-- {
		r.ka.Remove(r.leases[i])
		r.s.release(r.leases[i])
	}
	r.leases = nil
}

// close ends every lease of the run, the claim last, and the keep-alive.
func (r *slotRun) close() {
	r.endLeases()
	if r.ka != nil {
		r.ka.Stop()
	}
	if r.claim != nil {
		r.s.release(r.claim)
		r.claim = nil
	}
}

// execute runs the steps. It sets r.out, also when the handler ends its
// goroutine with runtime.Goexit (then the deferred finish records it).
func (r *slotRun) execute() {
	r.out = later(r.s.storeNow(), r.s.o.PollInterval)
	var sp obs.Span
	r.ctx, sp = r.s.tel.start(r.ctx, r.j.Name)
	defer func() { sp.End(r.spanOutcome(), r.state == slotFailed) }()
	defer func() {
		if r.begun && !r.finished {
			r.out = r.finish(r.handlerErr)
		}
		r.close()
	}()
	claim := func() (outcome, bool) {
		out, ok := r.takeClaim()
		r.s.claimTaken(r)
		return out, ok
	}
	for _, step := range []func() (outcome, bool){claim, r.check, r.takePermit, r.gate, r.beginAttempt} {
		out, ok := step()
		if !ok {
			r.out = out
			return
		}
	}
	err := r.handle()
	r.out = r.finish(err)
}

// takeClaim takes the slot's claim lease. A slot whose claim another node
// held when this node last looked is read first: if that node settled it,
// the slot is dropped without a claim (a claim and its release are two
// writes, a read is none).
func (r *slotRun) takeClaim() (outcome, bool) {
	sent := r.s.storeNow()
	if r.p.heldElsewhere {
		rec, err := r.s.store.Slot(r.ctx, r.j.Name, r.p.id)
		if err == nil && rec.Final() {
			r.log.Debug("schedule: slot settled by another node", "state", rec.State)
			return outcome{final: true}, false
		}
	}
	claim, err := r.s.locker.TryAcquire(r.ctx, scheddriver.ClaimKey(r.j.Name, r.p.id), r.s.o.ClaimTTL)
	if err != nil {
		var busy *lease.HeldError
		if errors.As(err, &busy) {
			// Another node runs it; look again when its claim would end.
			r.log.Debug("schedule: slot claimed by another node", "ttl", busy.TTL)
			r.p.heldElsewhere = true
			return later(sent, max(busy.TTL, r.s.o.PollInterval)), false
		}
		r.log.Warn("schedule: cannot claim the slot", "err", err)
		return later(sent, r.s.o.PollInterval), false
	}
	r.claim = r.hold(claim)
	return outcome{}, true
}

// check reads the slot's record before any job-wide lease is taken, so
// that a slot already settled elsewhere (done while this node waited for
// its claim) never holds the run lease another slot needs.
func (r *slotRun) check() (outcome, bool) {
	sent := r.s.storeNow()
	rec, err := r.s.store.Slot(r.ctx, r.j.Name, r.p.id)
	switch {
	case errors.Is(err, ErrNotFound):
		return outcome{}, true
	case err != nil:
		r.log.Warn("schedule: cannot read the slot's record", "err", err)
		return later(sent, r.s.o.PollInterval), false
	case rec.Final():
		r.log.Debug("schedule: slot already final", "state", rec.State)
		return outcome{final: true}, false
	case rec.State == Failed && rec.RetryAt.After(sent):
		return outcome{at: rec.RetryAt}, false
	}
	return outcome{}, true
}

// takePermit takes one of the job's catch-up permits for a catch-up slot.
func (r *slotRun) takePermit() (outcome, bool) {
	if !r.catchUp() {
		return outcome{}, true
	}
	sent := r.s.storeNow()
	for i := range r.j.CatchUpConcurrency {
		l, err := r.s.locker.TryAcquire(r.ctx, scheddriver.PermitKey(r.j.Name, i), r.s.o.ClaimTTL)
		if err == nil {
			r.leases = append(r.leases, r.hold(l))
			return outcome{}, true
		}
		if !errors.Is(err, lease.ErrHeld) {
			r.log.Warn("schedule: cannot take a catch-up permit", "err", err)
			break
		}
	}
	return later(sent, r.s.o.PollInterval), false
}

// gate applies the overlap policy. With OverlapAllow it lets every slot
// through. Otherwise the slot needs the job's run lease: under
// OverlapSkip a slot whose time came while the run of an earlier slot was
// already running (its record running since before this slot's time, its
// claim still held by that attempt) is recorded skipped; every other slot,
// and every slot under OverlapQueue or run as a catch-up, waits for the
// run lease, after the older slots of the job that this node is starting.
func (r *slotRun) gate() (outcome, bool) {
	defer r.s.gated(r.p)
	if r.j.Overlap == OverlapAllow {
		return outcome{}, true
	}
	mayskip := r.j.Overlap == OverlapSkip && !r.catchUp()
	pause := 5 * time.Millisecond
	for {
		wait := pause
		if r.s.olderGating(r.js, r.p) {
			// An older slot of the job decides first, on this node: wait
			// for it without asking the store anything, so that however
			// many slots queue at the gate, one of them polls the store.
			if !sleep(r.ctx, r.stop, wait) {
				return later(r.s.storeNow(), r.s.o.PollInterval), false
			}
			pause = min(2*pause, r.s.o.PollInterval)
			continue
		}
		run, err := r.s.locker.TryAcquire(r.ctx, scheddriver.RunKey(r.j.Name), r.s.o.ClaimTTL)
		if err == nil {
			r.leases = append(r.leases, r.hold(run))
			return outcome{}, true
		}
		var busy *lease.HeldError
		if !errors.As(err, &busy) {
			if r.stop.Err() == nil {
				r.log.Warn("schedule: cannot take the job's run lease", "err", err)
			}
			return later(r.s.storeNow(), r.s.o.PollInterval), false
		}
		if busy.TTL > 0 {
			wait = min(wait, busy.TTL)
		}
		if mayskip {
			running, err := r.earlierRunning()
			if err != nil {
				r.log.Warn("schedule: cannot tell whether an earlier slot still runs", "err", err)
				return later(r.s.storeNow(), r.s.o.PollInterval), false
			}
			if running != "" {
				return r.skip(running)
			}
		}
		if !sleep(r.ctx, r.stop, wait) {
			return later(r.s.storeNow(), r.s.o.PollInterval), false
		}
		pause = min(2*pause, r.s.o.PollInterval)
	}
}

// earlierRunning returns the ID of an earlier slot of the job whose run
// began before this slot's time and still runs (its record is running and
// that attempt still holds its claim), or "".
func (r *slotRun) earlierRunning() (string, error) {
	recs, err := r.s.store.Unfinished(r.ctx, r.j.Name, maxBacklog)
	if err != nil {
		return "", err
	}
	for _, rec := range recs {
		if !rec.SlotTime.Before(r.p.at) {
			break
		}
		if rec.State != Running || !rec.Started.Before(r.p.at) {
			continue
		}
		info, err := r.s.store.Claims().Inspect(r.ctx, scheddriver.ClaimKey(r.j.Name, rec.SlotID))
		if err != nil {
			return "", err
		}
		if info.Held && info.Fence == rec.Fence {
			return rec.SlotID, nil
		}
	}
	return "", nil
}

// skip records the slot skipped for the run of slot running.
func (r *slotRun) skip(running string) (outcome, bool) {
	sent := r.s.storeNow()
	_, err := r.s.begin(r.ctx, r.js, r.p, r.claim, "overlap: the run of slot "+running+" was still running")
	if err == nil {
		r.state = slotSkipped
		r.s.tel.slot(r.ctx, r.j.Name, slotSkipped)
	}
	if errors.Is(err, ErrSuperseded) {
		r.s.superseded(r.ctx, r.js)
	}
	if err == nil || errors.Is(err, ErrFinal) || errors.Is(err, ErrSuperseded) {
		return outcome{final: true}, false
	}
	r.log.Warn("schedule: cannot record the slot skipped", "err", err)
	return later(sent, r.s.o.PollInterval), false
}

// beginAttempt records the attempt's start.
func (r *slotRun) beginAttempt() (outcome, bool) {
	sent := r.s.storeNow()
	rec, err := r.s.begin(r.ctx, r.js, r.p, r.claim, "")
	var notDue *NotDueError
	switch {
	case errors.Is(err, ErrSuperseded):
		// Another definition of the job is the current one: this node's
		// slots are not to run (see Scheduler.superseded).
		r.s.superseded(r.ctx, r.js)
		return outcome{final: true}, false
	case errors.As(err, &notDue):
		r.log.Debug("schedule: slot not due on the store's clock", "wait", notDue.Wait)
		return later(sent, notDue.Wait), false
	case errors.Is(err, ErrFinal):
		r.log.Debug("schedule: slot already final", "err", err)
		return outcome{final: true}, false
	case err != nil:
		r.log.Warn("schedule: cannot record the attempt's start", "err", err)
		return later(sent, r.s.o.PollInterval), false
	}
	r.rec, r.begun = rec, true
	return outcome{}, true
}

// errGoexit is the error of a handler that ended its goroutine with
// runtime.Goexit (as testing's FailNow does) instead of returning.
var errGoexit = errors.New("schedule: handler exited without returning (runtime.Goexit)")

// handle calls the handler under the attempt's context (and the job's
// Timeout). A panic becomes the attempt's error, its stack logged; a
// runtime.Goexit is recorded by execute's deferred finish.
func (r *slotRun) handle() (err error) {
	slot := &Slot{Job: r.j.Name, Time: r.p.at, ID: r.p.id, Fence: r.claim.Fence(), Attempt: r.rec.Attempts, lease: r.claim}
	ctx := r.ctx
	if r.j.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.j.Timeout)
		defer cancel()
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			err = fmt.Errorf("schedule: handler panicked: %v", v)
			r.log.Error("schedule: handler panicked", "attempt", r.rec.Attempts, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		} else {
			err = errGoexit
			r.log.Error("schedule: handler exited without returning", "attempt", r.rec.Attempts)
		}
		r.handlerErr = err
	}()
	err = r.j.Run(ctx, slot)
	returned = true
	r.handlerErr = err
	return err
}

// claimLost reports whether the attempt lost a lease under the handler:
// its keep-alive saw it end, or the handler failed with a refusal of the
// claim (a stale completion) and the claim is indeed no longer held.
func (r *slotRun) claimLost(runErr error) bool {
	if errors.Is(context.Cause(r.ctx), lease.ErrLost) {
		return true
	}
	if runErr == nil || !(errors.Is(runErr, ErrStale) || errors.Is(runErr, lease.ErrNotHeld) || errors.Is(runErr, lease.ErrLost)) {
		return false
	}
	if r.claim.Err() != nil {
		return true
	}
	// A completion refused the claim before the keep-alive saw it go:
	// ask the store. A renewal the store answers proves the claim is
	// still ours (the refusal was about something else); one that it
	// refuses proves it lost; no answer leaves the refusal's word.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), storeTimeout)
	defer cancel()
	err := r.claim.Renew(ctx)
	return err != nil
}

// finish ends the run lease and the permit, then records the attempt's
// end.
func (r *slotRun) finish(runErr error) outcome {
	r.finished = true
	lost := r.claimLost(runErr)
	// The run lease and the catch-up permit end with the handler, before
	// the bookkeeping, so that the next slot does not wait for a run that
	// is over.
	r.endLeases()
	fin := scheddriver.FinishRequest{Job: r.j.Name, SlotID: r.p.id, Fence: r.claim.Fence(), State: Done}
	if runErr != nil {
		fin.State = Failed
		fin.Error = scheddriver.CutError(runErr.Error())
		switch {
		case lost:
			// Not the handler's fault: the claim ran out under it. The
			// slot is due again at once; its effect, if completed, is in
			// the ledger and will not be applied twice.
			fin.Error = scheddriver.CutError("claim lost while running: " + runErr.Error())
			fin.RetryAfter = time.Millisecond
		case errors.Is(context.Cause(r.ctx), errStopped):
			// Nor is a stop deadline: the slot is left due, as a dead
			// node's would be.
			fin.Error = scheddriver.CutError("node stopped while running: " + runErr.Error())
			fin.RetryAfter = time.Millisecond
		case r.rec.Attempts < r.j.Retry.Attempts:
			fin.RetryAfter = backoff(r.j.Retry, r.rec.Attempts)
		}
		r.log.Warn("schedule: attempt failed", "attempt", r.rec.Attempts, "claim_lost", lost, "err", runErr)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), storeTimeout)
	defer cancel()
	frec, err := r.s.store.Finish(ctx, fin)
	switch {
	case errors.Is(err, ErrStale):
		r.log.Warn("schedule: a newer attempt took the slot over while this one ran", "fence", fin.Fence)
		return later(r.s.storeNow(), r.s.o.ClaimTTL)
	case err != nil:
		r.log.Warn("schedule: cannot record the attempt's end; the slot will be looked at again", "err", err)
		return later(r.s.storeNow(), r.s.o.PollInterval)
	case frec.Final():
		if frec.State == Done {
			r.state = slotDone
		} else {
			r.state = slotFailed
		}
		r.s.tel.slot(ctx, r.j.Name, r.state)
		return outcome{final: true}
	}
	r.state = slotRetried
	r.s.tel.slot(ctx, r.j.Name, slotRetried)
	return outcome{at: frec.RetryAt}
}

// attempt runs one attempt at a pending slot and leaves its outcome on
// the slot, however the run ends.
func (s *Scheduler) attempt(hctx, stop context.Context, js *jobState, p *pendingSlot) {
	r := &slotRun{s: s, js: js, j: js.job, p: p, stop: stop, ctx: hctx, state: -1,
		log: s.log.With("job", js.job.Name, "slot", p.id)}
	defer func() {
		s.claimTaken(r) // if execute ended before its claim step
		s.mu.Lock()
		s.active--
		p.active, p.gating = false, false
		js.active--
		if p.late {
			js.activeLate--
		}
		if r.out.final {
			if js.pending[p.id] == p {
				delete(js.pending, p.id)
			}
		} else {
			p.notBefore = r.out.at
		}
		s.mu.Unlock()
		s.kick()
	}()
	r.execute()
}

// claimTaken records that r's claim step is over (taken or not), once,
// and lets start launch the next due slot.
func (s *Scheduler) claimTaken(r *slotRun) {
	s.mu.Lock()
	done := r.claimStepDone
	r.claimStepDone = true
	if !done {
		s.claiming--
	}
	s.mu.Unlock()
	if !done {
		s.kick()
	}
}

// gated marks p past the overlap gate.
func (s *Scheduler) gated(p *pendingSlot) {
	s.mu.Lock()
	p.gating = false
	s.mu.Unlock()
	s.kick() // the job's next slot may start (Scheduler.start)
}

// olderGating reports whether an older slot of the job is being started
// on this node and has not passed the overlap gate yet.
func (s *Scheduler) olderGating(js *jobState, p *pendingSlot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range js.pending {
		if q != p && q.active && q.gating && q.at.Before(p.at) {
			return true
		}
	}
	return false
}

// sleep waits d unless ctx or stop ends first; it reports whether d passed.
func sleep(ctx, stop context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop.Done():
	}
	return false
}

// begin records the start of an attempt under claim, or with a reason the
// slot skipped.
func (s *Scheduler) begin(ctx context.Context, js *jobState, p *pendingSlot, claim *lease.Lease, skipReason string) (Record, error) {
	req := scheddriver.BeginRequest{Job: js.job.Name, SlotID: p.id, SlotTime: p.at, Node: s.o.Node, Fence: claim.Fence(), Definition: js.fp}
	if skipReason != "" {
		req.Skip, req.Reason = true, skipReason
	}
	return s.store.Begin(ctx, req)
}

// release releases a lease after its work, even after a stop.
func (s *Scheduler) release(l *lease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		s.log.Debug("schedule: release failed; the lease expires on its own", "key", l.Key(), "err", err)
	}
}
