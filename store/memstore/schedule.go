package memstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// schedState is the scheduled-jobs state of a Store, guarded by Store.mu
// (the lease map's mutex), so that a completion checks the claim lease and
// writes the ledger in one step.
type schedState struct {
	recs   map[string]map[string]*schedule.Record // job -> slot ID -> record
	ledger map[string]map[string]uint64           // job -> slot ID -> completing fence
	values map[string]map[string][]byte           // job -> name -> value
	defs   map[string]schedule.Definition         // job -> current definition
}

func (s *Store) sched() *schedState {
	return s.view("schedule", func() any {
		return &schedState{
			recs:   map[string]map[string]*schedule.Record{},
			ledger: map[string]map[string]uint64{},
			values: map[string]map[string][]byte{},
			defs:   map[string]schedule.Definition{},
		}
	}).(*schedState)
}

// Schedules returns the store's schedule.Store view. Claims are leases of
// the store's lease view; records, ledger and slot values live in memory
// under the same mutex.
func (s *Store) Schedules() schedule.Store { return schedules{s} }

type schedules struct{ s *Store }

func (v schedules) Claims() lease.Store { return v.s.Leases() }

func (v schedules) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	return v.s.now(), nil
}

func (st *schedState) rec(job, id string) *schedule.Record {
	return st.recs[job][id]
}

// schedCopy returns a copy of r that shares nothing with the store.
func schedCopy(r *schedule.Record) schedule.Record {
	out := *r
	out.History = slices.Clone(r.History)
	return out
}

func (st *schedState) put(r *schedule.Record) {
	m := st.recs[r.Job]
	if m == nil {
		m = map[string]*schedule.Record{}
		st.recs[r.Job] = m
	}
	m[r.SlotID] = r
}

func (v schedules) Begin(ctx context.Context, req scheddriver.BeginRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Record{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := scheddriver.ApplyDefinition(req.Job, st.defs[req.Job].Fingerprint, req.Definition); err != nil {
		return schedule.Record{}, err
	}
	cur := st.rec(req.Job, req.SlotID)
	_, completed := st.ledger[req.Job][req.SlotID]
	r, write, err := scheddriver.ApplyBegin(cur, completed, req, s.now())
	if err != nil {
		return schedule.Record{}, err
	}
	if write {
		st.put(&r)
	}
	return schedCopy(&r), nil
}

func (v schedules) Finish(ctx context.Context, req scheddriver.FinishRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Record{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := st.rec(req.Job, req.SlotID)
	r, write, err := scheddriver.ApplyFinish(cur, req, s.now())
	if err != nil {
		return schedule.Record{}, err
	}
	if write {
		st.put(&r)
		if r.State == schedule.Done {
			st.complete(req.Job, req.SlotID, req.Fence)
		}
	}
	return schedCopy(&r), nil
}

func (st *schedState) complete(job, id string, f uint64) {
	m := st.ledger[job]
	if m == nil {
		m = map[string]uint64{}
		st.ledger[job] = m
	}
	if _, ok := m[id]; !ok {
		m[id] = f
	}
}

func (v schedules) Mark(ctx context.Context, req scheddriver.MarkRequest) (schedule.Record, bool, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Record{}, false, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := scheddriver.ApplyDefinition(req.Job, st.defs[req.Job].Fingerprint, req.Definition); err != nil {
		return schedule.Record{}, false, err
	}
	if r := st.rec(req.Job, req.SlotID); r != nil {
		return schedCopy(r), false, nil
	}
	r := &schedule.Record{Job: req.Job, SlotID: req.SlotID, SlotTime: req.SlotTime, State: req.State,
		Node: req.Node, Error: scheddriver.CutError(req.Reason), Finished: s.now()}
	st.put(r)
	return *r, true, nil
}

func (v schedules) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Record{}, err
	}
	if err := scheddriver.ValidateID(id); err != nil {
		return schedule.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Record{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := st.rec(job, id)
	if r == nil {
		return schedule.Record{}, fmt.Errorf("memstore: slot %s of %q: %w", id, job, schedule.ErrNotFound)
	}
	return schedCopy(r), nil
}

// sorted returns job's records that keep, ascending by slot time.
func (v schedules) sorted(ctx context.Context, job string, limit int, keep func(*schedule.Record) bool) ([]schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schedule.Record
	for _, r := range st.recs[job] {
		if keep(r) {
			out = append(out, schedCopy(r))
		}
	}
	slices.SortFunc(out, func(a, b schedule.Record) int { return a.SlotTime.Compare(b.SlotTime) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (v schedules) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	return v.sorted(ctx, job, limit, func(r *schedule.Record) bool {
		return !r.SlotTime.Before(from) && r.SlotTime.Before(to)
	})
}

func (v schedules) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	return v.sorted(ctx, job, limit, func(r *schedule.Record) bool { return !r.Final() })
}

func (v schedules) Last(ctx context.Context, job string) (time.Time, bool, error) {
	all, err := v.sorted(ctx, job, 0, func(*schedule.Record) bool { return true })
	if err != nil || len(all) == 0 {
		return time.Time{}, false, err
	}
	return all[len(all)-1].SlotTime, true, nil
}

// SlotEffect is one change that [Store.CompleteSlot] applies together with
// a slot's completion: setting or adding to a named value of the slot's
// job. Make them with SetSlotValue and AddSlotValue.
type SlotEffect struct {
	name  string
	value []byte
	add   int64
	isAdd bool
}

// SetSlotValue sets the job's value name to value.
func SetSlotValue(name string, value []byte) SlotEffect {
	return SlotEffect{name: name, value: append([]byte(nil), value...)}
}

// AddSlotValue adds delta to the job's value name, a decimal integer
// (missing counts as 0).
func AddSlotValue(name string, delta int64) SlotEffect {
	return SlotEffect{name: name, add: delta, isAdd: true}
}

// CompleteSlot is the fenced completion of a slot for effects the store
// holds: in one step under the store's mutex it checks that slot's claim is
// still current (the claim lease has the slot's token and fence and has not
// expired on the store's clock), records (job, slot) in the ledger, marks
// the slot done and applies effects to the job's values. If the ledger
// already has the slot, it returns an error wrapping
// schedule.ErrCompleted; if the claim is not current, one wrapping
// schedule.ErrStale (fence.ErrStale) and lease.ErrNotHeld. Either way, and
// on bad input (lease.ErrInvalid or schedule.ErrInvalid: value names follow
// the rules of lease keys; an add to a value that is not an integer),
// nothing is written.
func (s *Store) CompleteSlot(ctx context.Context, slot *schedule.Slot, effects ...SlotEffect) error {
	if slot == nil || slot.Lease() == nil {
		return fmt.Errorf("%w: memstore: nil slot or a slot without a claim", schedule.ErrInvalid)
	}
	if err := scheddriver.ValidateName(slot.Job); err != nil {
		return err
	}
	if err := scheddriver.ValidateID(slot.ID); err != nil {
		return err
	}
	for _, e := range effects {
		if err := leasedriver.ValidateKey(e.name); err != nil {
			return fmt.Errorf("memstore: slot value name: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if _, done := st.ledger[slot.Job][slot.ID]; done {
		return fmt.Errorf("memstore: slot %s of %q: %w", slot.ID, slot.Job, schedule.ErrCompleted)
	}
	l := slot.Lease()
	lr := s.leases[l.Key()]
	if lr == nil || lr.token != l.Token().Reveal() || lr.fence != l.Fence() || !lr.expires.After(now) {
		return fmt.Errorf("memstore: slot %s of %q: the claim with fence %d is not current: %w (%w)",
			slot.ID, slot.Job, l.Fence(), lease.ErrNotHeld, fence.ErrStale)
	}
	vals := st.values[slot.Job]
	next := make(map[string][]byte, len(effects))
	for _, e := range effects {
		if !e.isAdd {
			next[e.name] = e.value
			continue
		}
		cur, ok := next[e.name]
		if !ok {
			cur = vals[e.name]
		}
		n := int64(0)
		if len(cur) > 0 {
			var err error
			if n, err = strconv.ParseInt(string(cur), 10, 64); err != nil {
				return fmt.Errorf("%w: memstore: value %q of job %q is not an integer", schedule.ErrInvalid, e.name, slot.Job)
			}
		}
		next[e.name] = []byte(strconv.FormatInt(n+e.add, 10))
	}
	if vals == nil {
		vals = map[string][]byte{}
		st.values[slot.Job] = vals
	}
	for k, b := range next {
		vals[k] = b
	}
	st.complete(slot.Job, slot.ID, slot.Fence)
	r := st.rec(slot.Job, slot.ID)
	if r == nil {
		r = &schedule.Record{Job: slot.Job, SlotID: slot.ID, SlotTime: slot.Time, Fence: slot.Fence, Attempts: slot.Attempt}
		st.put(r)
	}
	r.State, r.Error, r.Finished, r.RetryAt = schedule.Done, "", now, time.Time{}
	r.History = scheddriver.EndAttempt(r.History, slot.Fence, now, schedule.AttemptDone, "")
	return nil
}

func (v schedules) Register(ctx context.Context, req scheddriver.RegisterRequest) (schedule.Definition, error) {
	if err := req.Validate(); err != nil {
		return schedule.Definition{}, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Definition{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := st.defs[req.Job]
	if prev.Fingerprint != req.Fingerprint {
		st.defs[req.Job] = schedule.Definition{Job: req.Job, Fingerprint: req.Fingerprint,
			Spec: scheddriver.CutError(req.Spec), Node: req.Node, Registered: s.now()}
	}
	return prev, nil
}

func (v schedules) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Definition{}, err
	}
	if err := ctx.Err(); err != nil {
		return schedule.Definition{}, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	s := v.s
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := st.defs[job]
	if !ok {
		return schedule.Definition{}, fmt.Errorf("memstore: job %q: no registered definition: %w", job, schedule.ErrNotFound)
	}
	return d, nil
}

// SlotValue returns the job's value name as CompleteSlot left it (nil if
// never set).
func (s *Store) SlotValue(ctx context.Context, job, name string) ([]byte, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	if err := leasedriver.ValidateKey(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	st := s.sched()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), st.values[job][name]...), nil
}
