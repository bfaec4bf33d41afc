package schedule

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurekit/tenure/lease"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Misfire says what happens to slots that were due while no node ran them
// (every node was down, or busy) and are now later than the job's
// MisfireThreshold.
type Misfire int

const (
	// MisfireCoalesce (the default) folds the late slots into one run: if
	// an on-time slot is due as well it is that run, else the latest late
	// slot runs. The others are recorded missed.
	MisfireCoalesce Misfire = iota
	// MisfireSkip records every late slot missed and runs none of them.
	MisfireSkip
	// MisfireCatchUp runs every late slot within CatchUpWindow, oldest
	// first, at most CatchUpConcurrency at a time across all nodes; older
	// ones are recorded missed. A late slot it runs is never skipped by
	// the overlap policy: under OverlapSkip and OverlapQueue it waits for
	// the job's run lease (so catch-up runs and on-time runs take turns,
	// one at a time); under OverlapAllow only the permits bound it.
	MisfireCatchUp
)

// String returns the policy's name.
func (m Misfire) String() string {
	switch m {
	case MisfireCoalesce:
		return "coalesce"
	case MisfireSkip:
		return "skip"
	case MisfireCatchUp:
		return "catch-up"
	}
	return fmt.Sprintf("schedule.Misfire(%d)", int(m))
}

// Overlap says what happens when a slot comes due while an earlier run of
// the same job is still running, on any node. Under OverlapSkip and
// OverlapQueue runs are serialized by the job's run lease (key RunKey of
// package schedule/driver), and a node claims a job's next slot only once
// the one before it has taken that lease or settled: slots claimed ahead
// would wait behind it, each holding and renewing a claim.
type Overlap int

const (
	// OverlapSkip (the default) records a slot skipped when the run of an
	// earlier slot of the job was already running at the slot's time and
	// still runs (its record running, its claim held). A slot that finds
	// the run lease taken for any other reason (a run that began after the
	// slot's time, a dead node's lease running out, a node that found its
	// slot already done, a catch-up run) waits for the lease and runs.
	OverlapSkip Overlap = iota
	// OverlapQueue makes the new slot wait until the running one ends.
	// Queued slots start one at a time, in slot order on each node.
	OverlapQueue
	// OverlapAllow runs slots concurrently.
	OverlapAllow
)

// String returns the policy's name.
func (o Overlap) String() string {
	switch o {
	case OverlapSkip:
		return "skip"
	case OverlapQueue:
		return "queue"
	case OverlapAllow:
		return "allow"
	}
	return fmt.Sprintf("schedule.Overlap(%d)", int(o))
}

// Retry says how often a failed slot is attempted again.
type Retry struct {
	// Attempts is the total number of attempts a slot gets when its handler
	// returns errors (1, the default, means no retry). A node that dies
	// mid-attempt does not use up an attempt's right to be recovered: its
	// slot is re-run elsewhere under the same ID. An attempt whose claim
	// was lost under it (its keep-alive saw the loss, or its completion
	// was refused as stale and the claim is gone), or that a graceful stop
	// cut short at its deadline, is retried at once and uses up nothing
	// either.
	Attempts int
	// Backoff is the wait before the second attempt, doubling for each
	// further one. Default 1s.
	Backoff time.Duration
	// MaxBackoff caps the wait. Default 1m.
	MaxBackoff time.Duration
}

// Job is a scheduled job.
type Job struct {
	// Name identifies the job on every node: 1 to MaxNameLen bytes of
	// letters, digits and - _ . : + @ ~.
	Name string
	// Schedule produces the slots (Cron or Every).
	Schedule Schedule
	// Run handles one slot. Its context ends when the claim is lost (cause
	// lease.ErrLost), at Timeout, or at the stop deadline of a graceful
	// stop. To make the effect exactly once, complete the slot in the same
	// step as the effect: the SQL stores' CompleteSlot in the transaction
	// of the business change, or the fenced completion of Redis and memory.
	// An error, a panic (its value in the record's error, its stack
	// logged) or a runtime.Goexit fails the attempt; the claim, the run
	// lease and the catch-up permit are released however it ends. An
	// error that wraps ErrStale (a refused completion) while the claim is
	// indeed gone counts as a lost claim: the slot is retried at once,
	// whatever Retry.Attempts says.
	Run func(ctx context.Context, slot *Slot) error
	// Misfire is the policy for late slots. Default MisfireCoalesce.
	Misfire Misfire
	// MisfireThreshold is how late (on the store's clock) a slot may start
	// and still be on time. Default 1 minute.
	MisfireThreshold time.Duration
	// Overlap is the policy for a slot due while a run is in progress.
	// Default OverlapSkip.
	Overlap Overlap
	// CatchUpWindow bounds MisfireCatchUp: late slots older than this are
	// recorded missed. Default 24h.
	CatchUpWindow time.Duration
	// CatchUpConcurrency bounds how many late slots run at once under
	// MisfireCatchUp, across all nodes. Default 1.
	CatchUpConcurrency int
	// Timeout bounds each attempt (0: no bound but the claim).
	Timeout time.Duration
	// Retry says how often a failing slot is attempted.
	Retry Retry
}

// Options configure a Scheduler. Nil means the defaults of each field.
type Options struct {
	// Node names this node in audit records. Default host name, process
	// ID and a random suffix.
	Node string
	// PollInterval is the longest the scheduler sleeps between looks at
	// the store (it wakes earlier for a slot it knows is due). Default 1s.
	PollInterval time.Duration
	// Logger receives warnings and debug records (a failed attempt and a
	// missed slot are warnings). Default: discard.
	Logger *slog.Logger
	// MeterProvider supplies the instruments tenure.schedule.slots
	// (attributes store, job, state: done, failed, retried, missed,
	// skipped) and, for the slots' claims, tenure.lease.acquires,
	// tenure.lease.lost and tenure.store.duration (see
	// docs/observability.md). Default: the global provider
	// (otel.GetMeterProvider). Instrumentation never changes a result.
	MeterProvider metric.MeterProvider
	// TracerProvider supplies the span tenure.schedule.slot around each
	// attempt at a slot (the handler's context carries it) and the spans of
	// the claims' leases. Default: the global provider
	// (otel.GetTracerProvider). When both providers are the OpenTelemetry
	// no-op providers, instrumentation is off entirely.
	TracerProvider trace.TracerProvider
	// Clock is this node's own clock. It is never used to judge whether a
	// slot is due (the store's clock does): at every poll the scheduler
	// reads the store's clock, measures its offset from Clock, and uses
	// the offset to time its sleeps. Default time.Now.
	Clock func() time.Time
	// ClaimTTL is the lease time of a slot's claim, renewed every third of
	// it while the handler runs; a dead node's slot is taken over this long
	// after its last renewal. Default 30s.
	ClaimTTL time.Duration
	// StopTimeout is how long a graceful stop lets running handlers finish
	// before their contexts are cancelled. Default 30s.
	StopTimeout time.Duration
	// MaxRunning bounds the attempts this node runs at once, over all
	// jobs; due slots beyond it wait for the next poll (or another node).
	// Default 64. Of these, at most 4 are taking their slot's claim at
	// any moment, the oldest due slots first: on a store that falls
	// behind (a busy SQLite file, say) new slots then wait their turn
	// here, oldest first, instead of queueing claim writes at the store
	// ahead of the renewals, completions and retries of older slots.
	MaxRunning int
}

const (
	// maxClaiming bounds the attempts of a node taking their claim at once.
	maxClaiming = 4
	// maxBacklog bounds how many late slots of a job one poll considers;
	// older ones are neither run nor recorded (a warning says how many).
	maxBacklog = 1000
	// storeTimeout bounds bookkeeping calls made after a handler's context
	// ended.
	storeTimeout = 10 * time.Second
	// releaseTimeout bounds a release; a lease that could not be released
	// expires on its own.
	releaseTimeout = 2 * time.Second
)

// Scheduler runs jobs on a Store: on every node with the same jobs, each
// slot's handler runs on one node at a time, claimed with a fenced lease.
// It is safe for concurrent use.
type Scheduler struct {
	store  Store
	o      Options
	log    *slog.Logger
	locker *lease.Locker
	tel    *telemetry // nil when instrumentation is off

	offset atomic.Int64 // store clock minus Options.Clock, ns, at the last poll
	wake   chan struct{}

	mu      sync.Mutex
	jobs    map[string]*jobState
	names   []string
	running bool
	active  int // attempts in flight on this node, over all jobs
	// claiming counts the attempts still taking their slot's claim: at
	// most maxClaiming at once (see MaxRunning).
	claiming int
}

type jobState struct {
	job        Job
	spec, fp   string // the definition's Spec and Fingerprint
	registered bool   // this node registered its definition
	stale      bool   // another definition of the job is the current one
	init       bool
	cursor     time.Time
	pending    map[string]*pendingSlot
	active     int
	activeLate int
}

type pendingSlot struct {
	id        string
	at        time.Time
	late      bool
	notBefore time.Time // store clock
	active    bool
	// gating is set while an attempt at the slot has not yet passed the
	// overlap gate: newer slots of the job on this node do not try the run
	// lease before it (slot order on each node).
	gating bool
	// heldElsewhere is set when an attempt found the slot's claim held by
	// another node: the next attempt reads the slot's record before it
	// claims, since that node has most likely settled it (attempts at one
	// slot run one at a time, so no lock is needed).
	heldElsewhere bool
}

// New returns a Scheduler on store. o may be nil for the defaults; a zero
// field takes its default. A nil store, a negative duration or
// MaxRunning, a ClaimTTL outside lease.MinTTL to lease.MaxTTL or a Node
// name that is not 1 to MaxNameLen bytes of printable ASCII is an error
// wrapping ErrInvalid.
func New(store Store, o *Options) (*Scheduler, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	s := &Scheduler{store: store, jobs: map[string]*jobState{}, wake: make(chan struct{}, 1)}
	if o != nil {
		s.o = *o
	}
	switch {
	case s.o.PollInterval < 0, s.o.ClaimTTL < 0, s.o.StopTimeout < 0:
		return nil, fmt.Errorf("%w: options: negative PollInterval, ClaimTTL or StopTimeout", ErrInvalid)
	case s.o.MaxRunning < 0:
		return nil, fmt.Errorf("%w: options: negative MaxRunning", ErrInvalid)
	case s.o.ClaimTTL != 0 && (s.o.ClaimTTL < lease.MinTTL || s.o.ClaimTTL > lease.MaxTTL):
		return nil, fmt.Errorf("%w: options: ClaimTTL %v outside %v to %v", ErrInvalid, s.o.ClaimTTL, lease.MinTTL, lease.MaxTTL)
	}
	if s.o.Node == "" {
		host, _ := os.Hostname()
		s.o.Node = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), crand.Text()[:6])
		if len(s.o.Node) > MaxNameLen || scheddriver.ValidateNode(s.o.Node) != nil {
			s.o.Node = fmt.Sprintf("node-%d-%s", os.Getpid(), crand.Text()[:6])
		}
	}
	if err := scheddriver.ValidateNode(s.o.Node); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	if s.o.PollInterval == 0 {
		s.o.PollInterval = time.Second
	}
	if s.o.Clock == nil {
		s.o.Clock = time.Now
	}
	if s.o.ClaimTTL == 0 {
		s.o.ClaimTTL = 30 * time.Second
	}
	if s.o.StopTimeout == 0 {
		s.o.StopTimeout = 30 * time.Second
	}
	if s.o.MaxRunning == 0 {
		s.o.MaxRunning = 64
	}
	s.log = s.o.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.tel = newTelemetry(store, s.o.MeterProvider, s.o.TracerProvider)
	s.store = newTimedStore(store, s.tel)
	locker, err := lease.New(store.Claims(), &lease.Options{Logger: s.log, MeterProvider: s.o.MeterProvider, TracerProvider: s.o.TracerProvider})
	if err != nil {
		return nil, fmt.Errorf("%w: the store's claims: %w", ErrInvalid, err)
	}
	s.locker = locker
	return s, nil
}

// Node returns the node name the scheduler records.
func (s *Scheduler) Node() string { return s.o.Node }

// Add validates j, applies its defaults and adds it. It may be called
// before or while Run runs. Nothing is written to the store.
func (s *Scheduler) Add(j Job) error {
	if err := scheddriver.ValidateName(j.Name); err != nil {
		return err
	}
	bad := func(why string) error { return fmt.Errorf("%w: job %q: %s", ErrInvalid, j.Name, why) }
	switch {
	case j.Schedule == nil:
		return bad("no schedule")
	case j.Run == nil:
		return bad("no Run function")
	case j.Misfire < MisfireCoalesce || j.Misfire > MisfireCatchUp:
		return bad("unknown misfire policy")
	case j.Overlap < OverlapSkip || j.Overlap > OverlapAllow:
		return bad("unknown overlap policy")
	case j.MisfireThreshold < 0, j.CatchUpWindow < 0, j.CatchUpConcurrency < 0, j.Timeout < 0:
		return bad("negative threshold, window, concurrency or timeout")
	case j.Retry.Attempts < 0, j.Retry.Backoff < 0, j.Retry.MaxBackoff < 0:
		return bad("negative retry setting")
	case j.CatchUpConcurrency > 1000:
		return bad("catch-up concurrency above 1000")
	}
	if v, ok := j.Schedule.(interface{ valid() error }); ok {
		if err := v.valid(); err != nil {
			return fmt.Errorf("job %q: %w", j.Name, err)
		}
	}
	j = j.withDefaults()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.jobs[j.Name]; dup {
		return bad("a job of that name was already added")
	}
	s.jobs[j.Name] = &jobState{job: j, spec: j.Spec(), fp: j.Fingerprint(), pending: map[string]*pendingSlot{}}
	s.names = append(s.names, j.Name)
	s.kick()
	return nil
}

// Slot returns the audit record of one slot of job (ErrNotFound if none).
func (s *Scheduler) Slot(ctx context.Context, job, slotID string) (Record, error) {
	return s.store.Slot(ctx, job, slotID)
}

// Slots returns the audit records of job with from <= slot time < to,
// ascending, at most limit (<= 0: all).
func (s *Scheduler) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]Record, error) {
	return s.store.Slots(ctx, job, from, to, limit)
}

// kick wakes the poll loop.
func (s *Scheduler) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// errStopped is the cause of a handler's context ended by the stop
// deadline of a graceful stop.
var errStopped = errors.New("schedule: the node stopped before the handler returned")

// Run runs the jobs until ctx ends, then stops gracefully: it claims no
// new slot, lets running handlers finish for up to Options.StopTimeout,
// then cancels their contexts (cause: the node stopped), waits for them to
// return and records their outcome. A slot whose handler failed once the
// stop deadline had ended its context is recorded failed but due again at
// once, using up no attempt, for another node (or this one, restarted) to
// run, as if the node had died under it. It returns nil after a graceful stop, or ErrRunning if Run is
// already running.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return ErrRunning
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	hctx, hcancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	hcancel := func() { hcancelCause(errStopped) }
	defer hcancel()
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		wait := s.poll(ctx, hctx, &wg)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-s.wake:
		}
		t.Stop()
	}
	stop := time.AfterFunc(s.o.StopTimeout, hcancel)
	wg.Wait()
	stop.Stop()
	return nil
}

// storeNow estimates the store's clock from this node's clock and the
// offset measured at the last poll.
func (s *Scheduler) storeNow() time.Time {
	return s.o.Clock().Add(time.Duration(s.offset.Load()))
}

// poll reads the store's clock, handles every job's due slots and returns
// how long to sleep.
func (s *Scheduler) poll(ctx, hctx context.Context, wg *sync.WaitGroup) time.Duration {
	now, err := s.store.Now(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("schedule: cannot read the store's clock; no slot is due until it answers", "err", err)
		}
		return s.o.PollInterval
	}
	s.offset.Store(int64(now.Sub(s.o.Clock())))
	s.mu.Lock()
	names := slices.Clone(s.names)
	s.mu.Unlock()
	wait := s.o.PollInterval
	for _, name := range names {
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		js := s.jobs[name]
		s.mu.Unlock()
		wait = min(wait, s.pollJob(ctx, hctx, wg, js, now))
	}
	return max(wait, time.Millisecond)
}

func (s *Scheduler) pollJob(ctx, hctx context.Context, wg *sync.WaitGroup, js *jobState, now time.Time) time.Duration {
	j := js.job
	if err := s.register(ctx, js); err != nil {
		s.log.Warn("schedule: cannot register the job's definition; no slot of it starts until it is", "job", j.Name, "err", err)
		return s.o.PollInterval
	}
	if s.isStale(js) && !s.current(ctx, js) {
		// Another definition runs the job: its slots are not this node's
		// to run or record, now or later.
		s.mu.Lock()
		js.cursor = now
		s.mu.Unlock()
		return s.o.PollInterval
	}
	var gap []time.Time
	if !js.init {
		last, ok, err := s.store.Last(ctx, j.Name)
		if err != nil {
			s.log.Warn("schedule: cannot read the job's last slot", "job", j.Name, "err", err)
			return s.o.PollInterval
		}
		open, err := s.store.Unfinished(ctx, j.Name, maxBacklog)
		if err != nil {
			s.log.Warn("schedule: cannot read the job's unfinished slots", "job", j.Name, "err", err)
			return s.o.PollInterval
		}
		if ok {
			if gap, err = s.unrecorded(ctx, js, last, now); err != nil {
				s.log.Warn("schedule: cannot read the job's recent slots", "job", j.Name, "err", err)
				return s.o.PollInterval
			}
		}
		s.mu.Lock()
		js.cursor = now
		if ok {
			js.cursor = last
		}
		for _, r := range open {
			if _, have := js.pending[r.SlotID]; !have {
				js.pending[r.SlotID] = &pendingSlot{id: r.SlotID, at: r.SlotTime, notBefore: r.RetryAt}
			}
		}
		js.init = true
		s.mu.Unlock()
	}

	// The slots due since the last poll, on the store's clock (on the
	// first, after those before the latest recorded one that have no
	// record).
	due := gap
	dropped := 0
	cursor := js.cursor
	for t := j.Schedule.Next(cursor); !t.IsZero() && !t.After(now); t = j.Schedule.Next(t) {
		due = append(due, t)
		cursor = t
		if len(due) >= 2*maxBacklog {
			dropped += len(due) - maxBacklog
			due = slices.Clone(due[len(due)-maxBacklog:])
		}
	}
	js.cursor = cursor
	if dropped > 0 {
		s.log.Warn("schedule: too many slots were due; the oldest are neither run nor recorded",
			"job", j.Name, "dropped", dropped)
	}
	if len(due) > 0 {
		s.classify(ctx, js, due, now)
	}
	s.start(hctx, ctx, wg, js, now)

	wait := s.o.PollInterval
	if next := j.Schedule.Next(cursor); !next.IsZero() {
		wait = min(wait, next.Sub(now))
	}
	s.mu.Lock()
	for _, p := range js.pending {
		if !p.active && p.notBefore.After(now) {
			wait = min(wait, p.notBefore.Sub(now))
		}
	}
	s.mu.Unlock()
	return wait
}

// classify applies the misfire policy to newly due slots: it records the
// ones that will not run missed and queues the others.
func (s *Scheduler) classify(ctx context.Context, js *jobState, due []time.Time, now time.Time) {
	j := js.job
	var late, onTime []time.Time
	for _, t := range due {
		if now.Sub(t) > j.MisfireThreshold {
			late = append(late, t)
		} else {
			onTime = append(onTime, t)
		}
	}
	type miss struct {
		at     time.Time
		reason string
	}
	var missed []miss
	run := map[time.Time]bool{}
	for _, t := range onTime {
		run[t] = false
	}
	switch j.Misfire {
	case MisfireSkip:
		for _, t := range late {
			missed = append(missed, miss{t, "misfire: late, policy skip"})
		}
	case MisfireCoalesce:
		if len(late) > 0 {
			keep := late[len(late)-1]
			if len(onTime) > 0 {
				keep = onTime[len(onTime)-1]
			} else {
				run[keep] = true
			}
			for _, t := range late {
				if !t.Equal(keep) {
					missed = append(missed, miss{t, "misfire: coalesced into " + j.Schedule.ID(keep)})
				}
			}
		}
	case MisfireCatchUp:
		for _, t := range late {
			if now.Sub(t) > j.CatchUpWindow {
				missed = append(missed, miss{t, "misfire: outside the catch-up window"})
			} else {
				run[t] = true
			}
		}
	}
	for _, m := range missed {
		if ctx.Err() != nil {
			return
		}
		id := j.Schedule.ID(m.at)
		_, wrote, err := s.store.Mark(ctx, scheddriver.MarkRequest{Job: j.Name, SlotID: id, SlotTime: m.at, Node: s.o.Node, State: Missed, Reason: m.reason, Definition: js.fp})
		if errors.Is(err, ErrSuperseded) {
			s.superseded(ctx, js)
			return
		}
		if err != nil {
			s.log.Warn("schedule: cannot record a missed slot", "job", j.Name, "slot", id, "err", err)
		} else if wrote {
			s.log.Warn("schedule: slot missed", "job", j.Name, "slot", id, "reason", m.reason)
			s.tel.slot(ctx, j.Name, slotMissed)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, isLate := range run {
		id := j.Schedule.ID(t)
		if _, have := js.pending[id]; !have {
			js.pending[id] = &pendingSlot{id: id, at: t, late: isLate}
		}
	}
}

// unrecorded returns the slots of the job up to last (the latest slot with
// a record) that are due at now, recent enough to run (within the misfire
// threshold, or the catch-up window under MisfireCatchUp; at most
// maxBacklog of them), no older than the registration of the job's
// current definition (when it is this node's) and have no record: slots
// that were due while the nodes that knew of them died before any began
// it. A node that starts takes them up with the slots after last, so no
// slot is forgotten because every node that had it pending went down
// before recording it.
func (s *Scheduler) unrecorded(ctx context.Context, js *jobState, last, now time.Time) ([]time.Time, error) {
	j := js.job
	def, err := s.store.Definition(ctx, j.Name)
	if errors.Is(err, ErrNotFound) || (err == nil && def.Fingerprint != js.fp) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	back := j.MisfireThreshold
	if j.Misfire == MisfireCatchUp {
		back = max(back, j.CatchUpWindow)
	}
	from := now.Add(-back)
	if def.Registered.After(from) {
		from = def.Registered
	}
	var slots []time.Time
	for t := j.Schedule.Next(from); !t.IsZero() && !t.After(last) && !t.After(now); t = j.Schedule.Next(t) {
		slots = append(slots, t)
		if len(slots) >= 2*maxBacklog {
			slots = slices.Clone(slots[len(slots)-maxBacklog:])
		}
	}
	if len(slots) > maxBacklog {
		slots = slots[len(slots)-maxBacklog:]
	}
	if len(slots) == 0 {
		return nil, nil
	}
	recs, err := s.store.Slots(ctx, j.Name, slots[0], last.Add(time.Nanosecond), 0)
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(recs))
	for _, r := range recs {
		have[r.SlotID] = true
	}
	var out []time.Time
	for _, t := range slots {
		if !have[j.Schedule.ID(t)] {
			out = append(out, t)
		}
	}
	return out, nil
}

// start launches attempts at the pending slots that may start now.
func (s *Scheduler) start(hctx, ctx context.Context, wg *sync.WaitGroup, js *jobState, now time.Time) {
	if ctx.Err() != nil || s.isStale(js) {
		return
	}
	j := js.job
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*pendingSlot, 0, len(js.pending))
	for _, p := range js.pending {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *pendingSlot) int { return a.at.Compare(b.at) })
	// Under an overlap policy other than OverlapAllow, the slots of a job
	// pass the gate one at a time in slot order, so one attempt of the job
	// at a time is before it: a newer slot is not claimed while an older
	// one waits there. Each attempt before the gate holds its slot's claim
	// and renews it; when the store is slower than the job's interval
	// (a busy machine, a job every few milliseconds), newer slots claimed
	// ahead would pile up behind the gate, and their renewals would take
	// the store's time from the slot that runs.
	if j.Overlap != OverlapAllow && slices.ContainsFunc(ps, func(p *pendingSlot) bool { return p.active && p.gating }) {
		return
	}
	for _, p := range ps {
		if j.Overlap == OverlapQueue && (js.active > 0 || p.active) {
			return // one at a time, in slot order
		}
		if p.active || p.notBefore.After(now) {
			if j.Overlap == OverlapQueue {
				return
			}
			continue
		}
		if p.late && j.Misfire == MisfireCatchUp && js.activeLate >= j.CatchUpConcurrency {
			continue
		}
		if s.active >= s.o.MaxRunning || s.claiming >= maxClaiming {
			return
		}
		s.active++
		s.claiming++
		p.active, p.gating = true, true
		js.active++
		if p.late {
			js.activeLate++
		}
		wg.Go(func() { s.attempt(hctx, ctx, js, p) })
		if j.Overlap != OverlapAllow {
			return // the next one when this one has passed the gate
		}
	}
}

// backoff is the wait after attempt n (1-based) failed.
func backoff(r Retry, n int) time.Duration {
	d := r.Backoff << min(n-1, 30)
	if d <= 0 || d > r.MaxBackoff {
		d = r.MaxBackoff
	}
	return d
}

// Claim claims one slot of an added job by hand, outside Run: it takes
// the slot's claim lease and records the attempt's start, as Run does
// before calling the handler, but without the overlap, misfire and
// catch-up policies. The slot time must be one of the job's slots. The
// claim is not renewed: finish within Options.ClaimTTL with
// Finish (or complete the slot in a store's CompleteSlot first). Errors
// are those of lease acquisition (lease.ErrHeld) and of Store.Begin
// (ErrNotDue, ErrFinal).
func (s *Scheduler) Claim(ctx context.Context, job string, at time.Time) (*Slot, error) {
	s.mu.Lock()
	js, ok := s.jobs[job]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: no job %q", ErrInvalid, job)
	}
	j := js.job
	if next := j.Schedule.Next(at.Add(-time.Nanosecond)); !next.Equal(at) {
		return nil, fmt.Errorf("%w: %v is not a slot of job %q", ErrInvalid, at, job)
	}
	if err := s.register(ctx, js); err != nil {
		return nil, err
	}
	p := &pendingSlot{id: j.Schedule.ID(at), at: at}
	claim, err := s.locker.TryAcquire(ctx, scheddriver.ClaimKey(j.Name, p.id), s.o.ClaimTTL)
	if err != nil {
		return nil, err
	}
	rec, err := s.begin(ctx, js, p, claim, "")
	if err != nil {
		s.release(claim)
		if errors.Is(err, ErrSuperseded) {
			s.superseded(ctx, js)
		}
		return nil, err
	}
	return &Slot{Job: j.Name, Time: at, ID: p.id, Fence: claim.Fence(), Attempt: rec.Attempts, lease: claim}, nil
}

// Finish records the end of a slot claimed with Claim (done if runErr is
// nil, else failed, final) and releases its claim.
func (s *Scheduler) Finish(ctx context.Context, slot *Slot, runErr error) (Record, error) {
	if slot == nil || slot.lease == nil {
		return Record{}, fmt.Errorf("%w: nil slot", ErrInvalid)
	}
	defer s.release(slot.lease)
	fin := scheddriver.FinishRequest{Job: slot.Job, SlotID: slot.ID, Fence: slot.Fence, State: Done}
	if runErr != nil {
		fin.State = Failed
		fin.Error = scheddriver.CutError(runErr.Error())
	}
	return s.store.Finish(ctx, fin)
}
