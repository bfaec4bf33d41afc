package schedule

import (
	"errors"

	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Limits on names.
const (
	// MaxNameLen is the longest job name in bytes.
	MaxNameLen = scheddriver.MaxNameLen
	// MaxIDLen is the longest slot ID in bytes.
	MaxIDLen = scheddriver.MaxIDLen
	// MaxErrorLen is the longest error message an audit record keeps; longer
	// ones are cut.
	MaxErrorLen = scheddriver.MaxErrorLen
	// MaxHistory is how many attempts a slot's record keeps in
	// Record.History: the latest ones. Record.Attempts counts them all.
	MaxHistory = scheddriver.MaxHistory
	// MaxFingerprintLen is the longest definition fingerprint in bytes.
	MaxFingerprintLen = scheddriver.MaxFingerprintLen
)

var (
	// ErrInvalid reports bad input (job, schedule, option, name or ID).
	// Nothing was written.
	ErrInvalid = scheddriver.ErrInvalid
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. The outcome of a write that was sent is unknown; every write
	// is idempotent per fence, so it can be sent again.
	ErrUnavailable = scheddriver.ErrUnavailable
	// ErrNotFound reports a slot without an audit record.
	ErrNotFound = scheddriver.ErrNotFound
	// ErrFinal reports a slot that has already reached a final state (done,
	// skipped, missed, or failed without a retry left). The error returned
	// is a *FinalError carrying the record.
	ErrFinal = scheddriver.ErrFinal
	// ErrNotDue reports a slot whose time (or next retry) has not come on
	// the store's clock. The error returned is a *NotDueError.
	ErrNotDue = scheddriver.ErrNotDue
	// ErrCompleted reports a completion of a slot whose effect was already
	// completed: the ledger has (job, slot). In a transaction, the caller
	// must roll back; its own writes must not land a second time.
	ErrCompleted = scheddriver.ErrCompleted
	// ErrRunning reports a second concurrent call of Scheduler.Run.
	ErrRunning = errors.New("schedule: scheduler already running")
	// ErrSuperseded reports a slot begun or marked under a job definition
	// that is not the job's current one: another node registered a
	// different definition of the job since. Nothing was written.
	ErrSuperseded = scheddriver.ErrSuperseded
)

// ErrStale is returned (wrapped) when an attempt's claim is no longer the
// current one: its lease expired or a newer attempt took the slot. It is
// fence.ErrStale, so one errors.Is test catches every guard refusal; a
// stale completion also wraps lease.ErrNotHeld.
var ErrStale = scheddriver.ErrStale

// FinalError is returned when a slot has reached a final state; its Record
// is the slot's record.
type FinalError = scheddriver.FinalError

// NotDueError is returned when a slot is not due yet on the store's clock;
// its Wait is how long, on the store's clock, until it is due.
type NotDueError = scheddriver.NotDueError

// State is the audit state of a slot: Running, Done, Failed, Skipped or
// Missed.
type State = scheddriver.State

// The states of a slot. Running is the only state that changes on its own
// (its claim expires and another node takes the slot over); failed is
// final unless the record has a RetryAt.
const (
	Running State = scheddriver.Running
	Done    State = scheddriver.Done
	Failed  State = scheddriver.Failed
	Skipped State = scheddriver.Skipped
	Missed  State = scheddriver.Missed
)

// Record is the audit record of one slot, as the store keeps it. Times are
// on the store's clock. Record.Final reports whether it is final.
type Record = scheddriver.Record

// Outcome is how one attempt at a slot ended.
type Outcome = scheddriver.Outcome

// The outcomes of an attempt.
const (
	// AttemptRunning: the attempt began and has not ended.
	AttemptRunning Outcome = scheddriver.AttemptRunning
	// AttemptDone: the attempt completed the slot.
	AttemptDone Outcome = scheddriver.AttemptDone
	// AttemptFailed: the attempt recorded a failure (Error says why).
	AttemptFailed Outcome = scheddriver.AttemptFailed
	// AttemptSuperseded: a newer attempt (a greater fence) began while
	// this one was still recorded running: its node died, paused past its
	// claim or lost the claim before it could record its end.
	AttemptSuperseded Outcome = scheddriver.AttemptSuperseded
)

// Attempt is one attempt at a slot, as the slot's record keeps it. Times
// are on the store's clock.
type Attempt = scheddriver.Attempt

// Definition is the registered definition of a job: the one that runs.
type Definition = scheddriver.Definition

// Store is the contract every backend implements for scheduled jobs
// (memstore, sqlitestore, pgstore, redisstore, etcdstore); applications
// pass one to New. Its methods and the requests they take are documented
// in package schedule/driver, for store writers.
type Store = scheddriver.Store
