package server

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/schedule"
)

// maxSlotPage is the most slot records one slotHistory answer holds.
const maxSlotPage = 1000

// scheduleOps are the operations on schedules: schedule.Store's slot
// history.
var scheduleOps = []operation{
	&op[slotHistoryQuery, slotList]{Method: "GET", Path: "/v1/schedule/slots", ID: "slotHistory",
		Needs: scheduleView, Scope: "job", Handle: slotHistory,
		Doc:     "The audit records of a job's slots with from <= slot time < to, oldest first.",
		Example: slotHistoryQuery{Job: "billing.nightly", Limit: 100}},
}

// slotHistoryQuery is the query of slotHistory.
type slotHistoryQuery struct {
	Job   string    `query:"job" doc:"the job name"`
	From  time.Time `query:"from,omitempty" doc:"the earliest slot time (default 24 hours ago)"`
	To    time.Time `query:"to,omitempty" doc:"the end of the slot times (default in a minute)"`
	Limit int       `query:"limit,omitempty" default:"100" doc:"the most records to return"`
}

// slotList is the answer to slotHistory.
type slotList struct {
	Slots []slotRecord `json:"slots"`
}

// slotRecord is the audit record of one slot (schedule.Record). Times
// are on the store's clock, in UTC; a zero time is left out.
type slotRecord struct {
	Job      string        `json:"job"`
	SlotID   string        `json:"slot_id"`
	SlotTime time.Time     `json:"slot_time,omitzero"`
	State    string        `json:"state" doc:"failed is final unless retry_at is set"`
	Node     string        `json:"node,omitempty" doc:"the node of the last attempt (or the node that recorded the slot skipped or missed)"`
	Attempts int           `json:"attempts" doc:"the attempts that began (a dead node's included)"`
	Fence    uint64        `json:"fence,omitempty" doc:"the claim fence of the last attempt"`
	Started  time.Time     `json:"started,omitzero" doc:"when the last attempt began"`
	Finished time.Time     `json:"finished,omitzero" doc:"when the last attempt ended"`
	Error    string        `json:"error,omitempty" doc:"the last attempt's error, or why the slot was skipped or missed"`
	RetryAt  time.Time     `json:"retry_at,omitzero" doc:"when a failed slot may be attempted again"`
	History  []slotAttempt `json:"history,omitempty" doc:"the slot's latest attempts, oldest first"`
}

// slotAttempt is one attempt at a slot (schedule.Attempt).
type slotAttempt struct {
	Node     string    `json:"node" doc:"the node that made the attempt"`
	Fence    uint64    `json:"fence" doc:"the fence of the attempt's claim"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero" doc:"when it recorded its end (absent while running, and for a superseded attempt)"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error,omitempty" doc:"the attempt's error, for a failed attempt"`
}

// utc returns t in UTC, keeping a zero time zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func slotOut(r schedule.Record) slotRecord {
	out := slotRecord{Job: r.Job, SlotID: r.SlotID, SlotTime: utc(r.SlotTime), State: string(r.State), Node: r.Node, Attempts: r.Attempts,
		Fence: r.Fence, Started: utc(r.Started), Finished: utc(r.Finished), Error: r.Error, RetryAt: utc(r.RetryAt)}
	for _, a := range r.History {
		out.History = append(out.History, slotAttempt{Node: a.Node, Fence: a.Fence, Started: utc(a.Started), Finished: utc(a.Finished), Outcome: string(a.Outcome), Error: a.Error})
	}
	return out
}

func slotHistory(ctx context.Context, r *request, in slotHistoryQuery) (slotList, error) {
	now := time.Now()
	if in.From.IsZero() {
		in.From = now.Add(-24 * time.Hour)
	}
	if in.To.IsZero() {
		in.To = now.Add(time.Minute)
	}
	if in.Limit < 1 || in.Limit > maxSlotPage {
		return slotList{}, invalidf("limit %d out of range [1, %d]", in.Limit, maxSlotPage)
	}
	recs, err := r.s.st.Schedules.Slots(ctx, in.Job, in.From, in.To, in.Limit)
	if err != nil {
		return slotList{}, err
	}
	out := slotList{Slots: make([]slotRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Slots = append(out.Slots, slotOut(rec))
	}
	return out, nil
}
