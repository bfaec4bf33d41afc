package driver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// ApplyBegin is the reference decision of [Store.Begin], for stores that
// decide in Go inside their own atomic step (memory, SQLite, PostgreSQL);
// Redis implements the same rules in Lua. cur is the slot's record (nil if
// none) with its History, completed whether the ledger has the slot, now
// the store's clock. It returns the record to store (its History updated:
// a running attempt it takes over superseded, the new attempt appended,
// at most MaxHistory kept) and whether to write it, or the error Begin
// returns. The definition check ([ApplyDefinition]) comes first and is the
// caller's.
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
	r.History = append([]Attempt(nil), r.History...)
	r.Node, r.Fence, r.RetryAt = req.Node, req.Fence, time.Time{}
	if req.Skip {
		r.State, r.Error, r.Finished = Skipped, CutError(req.Reason), now
		for i := range r.History {
			if r.History[i].Outcome == AttemptRunning {
				r.History[i].Outcome = AttemptSuperseded
			}
		}
	} else {
		r.State, r.Error, r.Started, r.Finished = Running, "", now, time.Time{}
		r.Attempts++
		r.History = BeginAttempt(r.History, Attempt{Node: req.Node, Fence: req.Fence, Started: now, Outcome: AttemptRunning})
	}
	return r, true, nil
}

// BeginAttempt returns h with every attempt still running marked
// superseded and a appended, keeping the latest MaxHistory attempts.
func BeginAttempt(h []Attempt, a Attempt) []Attempt {
	out := make([]Attempt, 0, min(len(h)+1, MaxHistory))
	if len(h) >= MaxHistory {
		h = h[len(h)-MaxHistory+1:]
	}
	for _, x := range h {
		if x.Outcome == AttemptRunning {
			x.Outcome = AttemptSuperseded
		}
		out = append(out, x)
	}
	return append(out, a)
}

// EndAttempt returns h with the attempt of fence f ended at now with
// outcome o and error msg (no change if h has no such attempt, or it is
// not running).
func EndAttempt(h []Attempt, f uint64, now time.Time, o Outcome, msg string) []Attempt {
	out := append([]Attempt(nil), h...)
	for i := range out {
		if out[i].Fence == f && out[i].Outcome == AttemptRunning {
			out[i].Finished, out[i].Outcome, out[i].Error = now, o, CutError(msg)
		}
	}
	return out
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
		r.History = EndAttempt(r.History, req.Fence, now, AttemptDone, "")
		return r, true, nil
	}
	r.State, r.Error = Failed, CutError(req.Error)
	r.History = EndAttempt(r.History, req.Fence, now, AttemptFailed, req.Error)
	if req.RetryAfter > 0 {
		r.RetryAt = now.Add(req.RetryAfter)
	}
	return r, true, nil
}

// ApplyDefinition is the reference definition check of [Store.Begin] and
// [Store.Mark]: current is the job's registered fingerprint ("" if none),
// req the caller's ("" skips the check). It returns an error wrapping
// ErrSuperseded when both are set and differ.
func ApplyDefinition(job, current, req string) error {
	if req == "" || current == "" || req == current {
		return nil
	}
	return fmt.Errorf("schedule: job %q: definition %s is not the current one (%s): %w", job, req, current, ErrSuperseded)
}

// storedAttempt is the storage form of an attempt: numbers as decimal
// strings (exact in every JSON implementation, Lua's cjson included),
// times in Unix microseconds on the store's clock, "0" for none.
type storedAttempt struct {
	Node     string `json:"n"`
	Fence    string `json:"f"`
	Started  string `json:"s"`
	Finished string `json:"e"`
	Outcome  string `json:"o"`
	Error    string `json:"err,omitempty"`
}

// EncodeHistory is the storage form of a slot's history that the stores
// share: a JSON array of {"n": node, "f": fence, "s": started, "e":
// finished, "o": outcome, "err": error}, numbers as decimal strings, times
// in Unix microseconds ("0" for none).
func EncodeHistory(h []Attempt) string {
	out := make([]storedAttempt, len(h))
	for i, a := range h {
		out[i] = storedAttempt{Node: a.Node, Fence: strconv.FormatUint(a.Fence, 10), Started: usText(a.Started),
			Finished: usText(a.Finished), Outcome: string(a.Outcome), Error: a.Error}
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return string(b)
}

// DecodeHistory reads EncodeHistory's form ("" and "{}", an empty Lua
// table, are an empty history).
func DecodeHistory(s string) ([]Attempt, error) {
	if s == "" || s == "{}" || s == "[]" {
		return nil, nil
	}
	var in []storedAttempt
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("schedule: malformed attempt history: %w", err)
	}
	out := make([]Attempt, len(in))
	for i, a := range in {
		f, err := strconv.ParseUint(a.Fence, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("schedule: malformed attempt history: fence %q", a.Fence)
		}
		s, err1 := usTime(a.Started)
		e, err2 := usTime(a.Finished)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("schedule: malformed attempt history: times %q, %q", a.Started, a.Finished)
		}
		out[i] = Attempt{Node: a.Node, Fence: f, Started: s, Finished: e, Outcome: Outcome(a.Outcome), Error: a.Error}
	}
	return out, nil
}

func usText(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

func usTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}, err // 0 (in any spelling) is no time
	}
	return time.UnixMicro(n), nil
}
