package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/jsonx"
	"github.com/tenurekit/tenure/lease"
)

// Limits on names.
const (
	// MaxNameLen is the longest job name in bytes.
	MaxNameLen = 128
	// MaxIDLen is the longest slot ID in bytes.
	MaxIDLen = 64
	// MaxErrorLen is the longest error message an audit record keeps; longer
	// ones are cut.
	MaxErrorLen = 1024
	// MaxHistory is how many attempts a slot's record keeps in
	// Record.History: the latest ones. Record.Attempts counts them all.
	MaxHistory = 16
	// MaxFingerprintLen is the longest definition fingerprint in bytes.
	MaxFingerprintLen = 64
)

var (
	// ErrInvalid reports bad input (job, schedule, option, name or ID).
	// Nothing was written.
	ErrInvalid = kind.New("schedule: invalid argument", tenure.ErrInvalid)
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. The outcome of a write that was sent is unknown; every write
	// is idempotent per fence, so it can be sent again.
	ErrUnavailable = kind.New("schedule: store unavailable (outcome unknown)", tenure.ErrUnavailable)
	// ErrNotFound reports a slot without an audit record.
	ErrNotFound = kind.New("schedule: no such slot", tenure.ErrNotFound)
	// ErrFinal reports a slot that has already reached a final state (done,
	// skipped, missed, or failed without a retry left). The error returned
	// is a *FinalError carrying the record.
	ErrFinal = errors.New("schedule: slot already final")
	// ErrNotDue reports a slot whose time (or next retry) has not come on
	// the store's clock. The error returned is a *NotDueError.
	ErrNotDue = errors.New("schedule: slot not due yet")
	// ErrCompleted reports a completion of a slot whose effect was already
	// completed: the ledger has (job, slot). In a transaction, the caller
	// must roll back; its own writes must not land a second time.
	ErrCompleted = errors.New("schedule: slot already completed")
	// ErrSuperseded reports a Begin or Mark made under a job definition
	// that is not the job's current one (see [Store.Register]): another
	// node registered a different definition of the job since. Nothing
	// was written.
	ErrSuperseded = errors.New("schedule: job definition superseded")
)

// ErrStale is returned (wrapped) when an attempt's claim is no longer the
// current one: its lease expired or a newer attempt took the slot. It is
// fence.ErrStale, so one errors.Is test catches every guard refusal; a
// stale completion also wraps lease.ErrNotHeld.
var ErrStale = fence.ErrStale

// FinalError is returned when a slot has reached a final state.
type FinalError struct{ Record Record }

func (e *FinalError) Error() string {
	return fmt.Sprintf("schedule: slot %s of %q is %s", e.Record.SlotID, e.Record.Job, e.Record.State)
}

// Is reports whether target is ErrFinal.
func (e *FinalError) Is(target error) bool { return target == ErrFinal }

// NotDueError is returned when a slot is not due yet on the store's clock.
type NotDueError struct {
	// Wait is how long, on the store's clock, until it is due.
	Wait time.Duration
}

func (e *NotDueError) Error() string {
	return fmt.Sprintf("schedule: slot not due for another %v (store clock)", e.Wait)
}

// Is reports whether target is ErrNotDue.
func (e *NotDueError) Is(target error) bool { return target == ErrNotDue }

// State is the audit state of a slot.
type State string

// The states of a slot. Running is the only state that changes on its own
// (its claim expires and another node takes the slot over); failed is
// final unless the record has a RetryAt.
const (
	Running State = "running"
	Done    State = "done"
	Failed  State = "failed"
	Skipped State = "skipped"
	Missed  State = "missed"
)

// Final reports whether a record in state st with retryAt is final.
func Final(st State, retryAt time.Time) bool {
	switch st {
	case Done, Skipped, Missed:
		return true
	case Failed:
		return retryAt.IsZero()
	}
	return false
}

// Record is the audit record of one slot, as the store keeps it. Times are
// on the store's clock.
type Record struct {
	Job      string
	SlotID   string
	SlotTime time.Time
	State    State
	// Node is the node of the last attempt (or the node that recorded the
	// slot skipped or missed).
	Node string
	// Attempts counts the attempts that began (a dead node's included).
	Attempts int
	// Fence is the claim fence of the last attempt (0 for a slot skipped
	// or missed without a claim).
	Fence uint64
	// Started is when the last attempt began; Finished when it ended (zero
	// while running).
	Started, Finished time.Time
	// Error is the last attempt's error, or why the slot was skipped or
	// missed.
	Error string
	// RetryAt is when a failed slot may be attempted again; zero when it
	// will not be.
	RetryAt time.Time
	// History is the slot's latest attempts, oldest first, at most
	// MaxHistory of them (Attempts counts every attempt, so it may be
	// greater than len(History)). Store.Slot and Store.Slots fill it; the
	// records that Begin, Finish, Mark and Unfinished return may leave it
	// nil.
	History []Attempt
}

// Outcome is how one attempt at a slot ended.
type Outcome string

// The outcomes of an attempt.
const (
	// AttemptRunning: the attempt began and has not ended.
	AttemptRunning Outcome = "running"
	// AttemptDone: the attempt completed the slot.
	AttemptDone Outcome = "done"
	// AttemptFailed: the attempt recorded a failure (Error says why).
	AttemptFailed Outcome = "failed"
	// AttemptSuperseded: a newer attempt (a greater fence) began while
	// this one was still recorded running: its node died, paused past its
	// claim or lost the claim before it could record its end.
	AttemptSuperseded Outcome = "superseded"
)

// Attempt is one attempt at a slot, as the slot's record keeps it. Times
// are on the store's clock.
type Attempt struct {
	// Node is the node that made the attempt.
	Node string
	// Fence is the fence of the attempt's claim.
	Fence uint64
	// Started is when the attempt began; Finished when it recorded its
	// end (zero while running, and for a superseded attempt).
	Started, Finished time.Time
	// Outcome is how it ended.
	Outcome Outcome
	// Error is the attempt's error (cut to MaxErrorLen) for a failed
	// attempt.
	Error string
}

// Final reports whether the record is in a final state.
func (r Record) Final() bool { return Final(r.State, r.RetryAt) }

// BeginRequest asks a store to record the start of an attempt.
type BeginRequest struct {
	Job, SlotID string
	SlotTime    time.Time
	Node        string
	// Fence is the fence of the claim lease the caller holds on
	// ClaimKey(Job, SlotID).
	Fence uint64
	// Skip records the slot skipped (final, no attempt counted) instead of
	// running, with Reason: the overlap policy refused it.
	Skip   bool
	Reason string
	// Definition is the fingerprint of the job definition the caller runs
	// (schedule.Job.Fingerprint). If it is set and the job has a registered
	// definition with another fingerprint, Begin refuses with an error
	// wrapping ErrSuperseded and writes nothing. Empty skips the check.
	Definition string
}

// FinishRequest asks a store to record the end of an attempt.
type FinishRequest struct {
	Job, SlotID string
	// Fence is the fence of the attempt's claim.
	Fence uint64
	// State is Done or Failed.
	State State
	// Error is the attempt's error (cut to MaxErrorLen).
	Error string
	// RetryAfter, for Failed, makes the slot due again that long after now
	// (store clock); zero makes the failure final.
	RetryAfter time.Duration
}

// MarkRequest asks a store to record a slot skipped or missed without an
// attempt.
type MarkRequest struct {
	Job, SlotID string
	SlotTime    time.Time
	Node        string
	// State is Missed or Skipped.
	State  State
	Reason string
	// Definition is the fingerprint of the caller's job definition, checked
	// as BeginRequest.Definition is.
	Definition string
}

// Definition is the registered definition of a job: the one that runs.
type Definition struct {
	Job string
	// Fingerprint identifies the definition (schedule.Job.Fingerprint).
	Fingerprint string
	// Spec describes it (schedule.Job.Spec), for people.
	Spec string
	// Node is the node that registered it; Registered when (store clock).
	Node       string
	Registered time.Time
}

// RegisterRequest asks a store to make a job definition the current one.
type RegisterRequest struct {
	Job string
	// Fingerprint identifies the definition: 1 to MaxFingerprintLen bytes
	// of the characters slot IDs allow.
	Fingerprint string
	// Spec describes the definition (cut to MaxErrorLen).
	Spec string
	// Node is the registering node.
	Node string
}

// Store is the contract every backend implements for scheduled jobs. All
// times are judged on the store's clock. Implementations validate their
// input with [ValidateName] and [ValidateID] before writing, wrap transport
// failures in ErrUnavailable, and are safe for concurrent use. Each write is
// one atomic, conditional step.
type Store interface {
	// Claims returns the lease store on which slots are claimed
	// (ClaimKey), runs of a job are serialized (RunKey) and catch-up
	// permits are taken (PermitKey). It is the same store's lease view, or
	// (Redis) one that keeps a job's claims in the job's hash slot, next to
	// its ledger.
	Claims() lease.Store
	// Now returns the store's clock.
	Now(ctx context.Context) (time.Time, error)
	// Begin records the start of an attempt by the holder of the claim
	// with req.Fence. In one atomic step it checks, on the store's clock,
	// that the slot is due (SlotTime, and RetryAt of a failed slot, not in
	// the future: else a *NotDueError), not final (else a *FinalError) and
	// not taken by a newer fence (else an error wrapping ErrStale); then it
	// sets the record running, counts the attempt, and stores node, fence
	// and start time. Repeating a Begin with the fence of the running
	// attempt returns its record unchanged (a retried request). With
	// req.Skip it records the slot skipped instead.
	Begin(ctx context.Context, req BeginRequest) (Record, error)
	// Finish records the end of the attempt with req.Fence: done (which
	// also writes the ledger, if the attempt did not complete the slot
	// itself) or failed. If a newer attempt has taken the slot, it returns
	// an error wrapping ErrStale and changes nothing. Finishing a slot that
	// is already done (its effect was completed in the ledger) returns the
	// done record whatever req.State says.
	Finish(ctx context.Context, req FinishRequest) (Record, error)
	// Mark records a slot missed or skipped if it has no record yet; it
	// returns the slot's record and whether it wrote it.
	Mark(ctx context.Context, req MarkRequest) (Record, bool, error)
	// Slot returns a slot's record, or ErrNotFound.
	Slot(ctx context.Context, job, slotID string) (Record, error)
	// Slots returns the records of job with from <= SlotTime < to,
	// ascending by slot time, at most limit (<= 0: all).
	Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]Record, error)
	// Unfinished returns up to limit records of job that are not final
	// (running, or failed with a retry), ascending by slot time.
	Unfinished(ctx context.Context, job string, limit int) ([]Record, error)
	// Last returns the latest slot time recorded for job (false if none).
	Last(ctx context.Context, job string) (time.Time, bool, error)
	// Register makes req's definition the job's current one, in one
	// atomic step that Begin and Mark are serialized with: from then on,
	// a Begin or Mark carrying another definition's fingerprint is
	// refused (ErrSuperseded). It returns the definition that was current
	// before (zero if none). Registering the current fingerprint again
	// writes nothing (the definition keeps its first Node and Registered).
	Register(ctx context.Context, req RegisterRequest) (Definition, error)
	// Definition returns the job's current definition, or ErrNotFound.
	Definition(ctx context.Context, job string) (Definition, error)
}

// Key layout on the claims lease store. Every key of a job starts with
// "schedule/<job>/".
const keyPrefix = "schedule/"

// ClaimKey is the lease key on which a slot is claimed.
func ClaimKey(job, slotID string) string { return keyPrefix + job + "/slot/" + slotID }

// RunKey is the lease key that serializes a job's runs (Overlap Skip and
// Queue).
func RunKey(job string) string { return keyPrefix + job + "/run" }

// PermitKey is the lease key of catch-up permit i of a job.
func PermitKey(job string, i int) string { return fmt.Sprintf("%s%s/catch-up/%d", keyPrefix, job, i) }

// JobOfKey returns the job of a claims key ("schedule/<job>/...") and the
// rest after the job, or false if key is not one.
func JobOfKey(key string) (job, rest string, ok bool) {
	if len(key) <= len(keyPrefix) || key[:len(keyPrefix)] != keyPrefix {
		return "", "", false
	}
	k := key[len(keyPrefix):]
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			if i == 0 || i == len(k)-1 {
				return "", "", false
			}
			return k[:i], k[i+1:], true
		}
	}
	return "", "", false
}

// nameChar reports whether c may appear in a job name or slot ID.
func nameChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', ':', '+', '@', '~':
		return true
	}
	return false
}

// ValidateName checks a job name: 1 to MaxNameLen bytes of letters,
// digits and - _ . : + @ ~ (no slash, space or braces).
func ValidateName(job string) error {
	if job == "" || len(job) > MaxNameLen {
		return fmt.Errorf("%w: job name must be 1 to %d bytes", ErrInvalid, MaxNameLen)
	}
	for i := 0; i < len(job); i++ {
		if !nameChar(job[i]) {
			return fmt.Errorf("%w: job name %q: only letters, digits and - _ . : + @ ~", ErrInvalid, job)
		}
	}
	return nil
}

// ValidateID checks a slot ID: 1 to MaxIDLen bytes of the characters job
// names allow.
func ValidateID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: slot ID must be 1 to %d bytes", ErrInvalid, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !nameChar(id[i]) {
			return fmt.Errorf("%w: slot ID %q: only letters, digits and - _ . : + @ ~", ErrInvalid, id)
		}
	}
	return nil
}

// Validate checks what a store must check before it writes.
func (r BeginRequest) Validate() error {
	if err := validateSlot(r.Job, r.SlotID, r.SlotTime); err != nil {
		return err
	}
	if r.Fence == 0 || r.Fence > 1<<63-1 {
		return fmt.Errorf("%w: fence %d out of range", ErrInvalid, r.Fence)
	}
	if r.Definition != "" {
		if err := ValidateFingerprint(r.Definition); err != nil {
			return err
		}
	}
	return ValidateNode(r.Node)
}

// Validate checks what a store must check before it writes.
func (r RegisterRequest) Validate() error {
	if err := ValidateName(r.Job); err != nil {
		return err
	}
	if err := ValidateFingerprint(r.Fingerprint); err != nil {
		return err
	}
	return ValidateNode(r.Node)
}

// ValidateFingerprint checks a definition fingerprint: 1 to
// MaxFingerprintLen bytes of the characters slot IDs allow.
func ValidateFingerprint(fp string) error {
	if fp == "" || len(fp) > MaxFingerprintLen {
		return fmt.Errorf("%w: definition fingerprint must be 1 to %d bytes", ErrInvalid, MaxFingerprintLen)
	}
	for i := 0; i < len(fp); i++ {
		if !nameChar(fp[i]) {
			return fmt.Errorf("%w: definition fingerprint %q: only letters, digits and - _ . : + @ ~", ErrInvalid, fp)
		}
	}
	return nil
}

// Validate checks what a store must check before it writes.
func (r FinishRequest) Validate() error {
	if err := ValidateName(r.Job); err != nil {
		return err
	}
	if err := ValidateID(r.SlotID); err != nil {
		return err
	}
	if r.Fence == 0 || r.Fence > 1<<63-1 {
		return fmt.Errorf("%w: fence %d out of range", ErrInvalid, r.Fence)
	}
	if r.State != Done && r.State != Failed {
		return fmt.Errorf("%w: finish state %q (want done or failed)", ErrInvalid, r.State)
	}
	if r.RetryAfter < 0 || r.RetryAfter > lease.MaxTTL*365 {
		return fmt.Errorf("%w: retry after %v", ErrInvalid, r.RetryAfter)
	}
	return nil
}

// Validate checks what a store must check before it writes.
func (r MarkRequest) Validate() error {
	if err := validateSlot(r.Job, r.SlotID, r.SlotTime); err != nil {
		return err
	}
	if r.State != Missed && r.State != Skipped {
		return fmt.Errorf("%w: mark state %q (want missed or skipped)", ErrInvalid, r.State)
	}
	if r.Definition != "" {
		if err := ValidateFingerprint(r.Definition); err != nil {
			return err
		}
	}
	return ValidateNode(r.Node)
}

func validateSlot(job, id string, t time.Time) error {
	if err := ValidateName(job); err != nil {
		return err
	}
	if err := ValidateID(id); err != nil {
		return err
	}
	if t.IsZero() || t.Year() < 1971 || t.Year() > 9999 {
		return fmt.Errorf("%w: slot time %v out of range", ErrInvalid, t)
	}
	return nil
}

// ValidateNode checks a node name: 1 to MaxNameLen bytes of printable
// ASCII.
func ValidateNode(node string) error {
	if node == "" || len(node) > MaxNameLen {
		return fmt.Errorf("%w: node name must be 1 to %d bytes", ErrInvalid, MaxNameLen)
	}
	for i := 0; i < len(node); i++ {
		if c := node[i]; c < ' ' || c > '~' {
			return fmt.Errorf("%w: node name must be printable ASCII", ErrInvalid)
		}
	}
	return nil
}

// CutError shortens an error message to MaxErrorLen bytes for a record.
func CutError(msg string) string {
	if len(msg) <= MaxErrorLen {
		return msg
	}
	cut := MaxErrorLen
	for cut > 0 && msg[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return msg[:cut]
}

// MarshalJSON writes the record with times in RFC 3339 and zero times left
// out: {"job":…,"slot_id":…,"slot_time":…,"state":"done","node":…,
// "attempts":1,"fence":…,"started":…,"finished":…,"history":[…]}, each
// attempt of the history as Attempt.MarshalJSON writes it.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Job      string    `json:"job"`
		SlotID   string    `json:"slot_id"`
		SlotTime *string   `json:"slot_time,omitempty"`
		State    State     `json:"state"`
		Node     string    `json:"node,omitempty"`
		Attempts int       `json:"attempts"`
		Fence    uint64    `json:"fence,omitempty"`
		Started  *string   `json:"started,omitempty"`
		Finished *string   `json:"finished,omitempty"`
		Error    string    `json:"error,omitempty"`
		RetryAt  *string   `json:"retry_at,omitempty"`
		History  []Attempt `json:"history,omitempty"`
	}{r.Job, r.SlotID, jsonx.Time(r.SlotTime), r.State, r.Node, r.Attempts, r.Fence,
		jsonx.Time(r.Started), jsonx.Time(r.Finished), r.Error, jsonx.Time(r.RetryAt), r.History})
}

// MarshalJSON writes the attempt with times in RFC 3339 and zero times
// left out: {"node":…,"fence":…,"started":…,"finished":…,
// "outcome":"failed","error":…}.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Node     string  `json:"node"`
		Fence    uint64  `json:"fence"`
		Started  *string `json:"started,omitempty"`
		Finished *string `json:"finished,omitempty"`
		Outcome  Outcome `json:"outcome"`
		Error    string  `json:"error,omitempty"`
	}{a.Node, a.Fence, jsonx.Time(a.Started), jsonx.Time(a.Finished), a.Outcome, a.Error})
}

// MarshalJSON writes the definition: {"job":…,"fingerprint":…,"spec":…,
// "node":…,"registered":…}.
func (d Definition) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Job         string  `json:"job"`
		Fingerprint string  `json:"fingerprint"`
		Spec        string  `json:"spec,omitempty"`
		Node        string  `json:"node,omitempty"`
		Registered  *string `json:"registered,omitempty"`
	}{d.Job, d.Fingerprint, d.Spec, d.Node, jsonx.Time(d.Registered)})
}
