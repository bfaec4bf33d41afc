package schedule

import (
	"fmt"
	"time"
)

// ApplyBegin is the reference decision of [Store.Begin], for stores that
// decide in Go inside their own atomic step (memory, SQLite); the others
// implement the same rules in their own language. cur is the slot's record
// (nil if none), completed whether the ledger has the slot, now the store's
// clock. It returns the record to store and whether to write it, or the
// error Begin returns.
func ApplyBegin(cur *Record, completed bool, req BeginRequest, now time.Time) (Record, bool, error) {
	if cur != nil {
		if cur.Final() {
			return Record{}, false, &FinalError{Record: *cur}
		}
		if cur.Fence > req.Fence || (cur.Fence == req.Fence && (cur.State != Running || req.Skip)) {
			return Record{}, false, fmt.Errorf("schedule: slot %s of %q: the attempt with fence %d is not the current one: %w", req.SlotID, req.Job, req.Fence, ErrStale)
		}
		if cur.Fence == req.Fence {
			return *cur, false, nil // a repeated Begin of the running attempt
		}
	}
	if completed {
		return Record{}, false, &FinalError{Record: Record{Job: req.Job, SlotID: req.SlotID, SlotTime: req.SlotTime, State: Done}}
	}
	if w := req.SlotTime.Sub(now); w > 0 {
		return Record{}, false, &NotDueError{Wait: w}
	}
	if cur != nil && cur.RetryAt.After(now) {
		return Record{}, false, &NotDueError{Wait: cur.RetryAt.Sub(now)}
	}
	r := Record{Job: req.Job, SlotID: req.SlotID, SlotTime: req.SlotTime}
	if cur != nil {
		r = *cur
	}
	r.Node, r.Fence, r.RetryAt = req.Node, req.Fence, time.Time{}
	if req.Skip {
		r.State, r.Error, r.Finished = Skipped, CutError(req.Reason), now
	} else {
		r.State, r.Error, r.Started, r.Finished = Running, "", now, time.Time{}
		r.Attempts++
	}
	return r, true, nil
}

// ApplyFinish is the reference decision of [Store.Finish] (see
// ApplyBegin). A Done result must also write the ledger if it has no entry
// for the slot.
func ApplyFinish(cur *Record, req FinishRequest, now time.Time) (Record, bool, error) {
	switch {
	case cur == nil || (cur.State != Done && (cur.Fence != req.Fence || cur.State != Running)):
		return Record{}, false, fmt.Errorf("schedule: slot %s of %q: the attempt with fence %d is not the current one: %w", req.SlotID, req.Job, req.Fence, ErrStale)
	case cur.State == Done:
		return *cur, false, nil
	}
	r := *cur
	r.Finished = now
	if req.State == Done {
		r.State, r.Error = Done, ""
		return r, true, nil
	}
	r.State, r.Error = Failed, CutError(req.Error)
	if req.RetryAfter > 0 {
		r.RetryAt = now.Add(req.RetryAfter)
	}
	return r, true, nil
}
