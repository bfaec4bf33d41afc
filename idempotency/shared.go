package idempotency

import "github.com/tenurekit/tenure/idempotency/driver"

// The types, limits and errors below are defined once in package driver,
// which store implementations import; these names are the same types and
// values, so errors.Is(err, ErrInvalid) holds for a store's error.

// ID names one idempotency record: a scope and a client key.
type ID = driver.ID

// Outcome is a recorded result: a value, or a final error's message.
type Outcome = driver.Outcome

// Record is what a store holds for an ID, as Inspect and Admin.List report
// it (package driver's Record):
//
//	type Record struct {
//		ID                          // scope and key
//		Exists      bool            // false: none written, released, or retention over
//		Completed   bool            // a result is recorded (false while claimed)
//		Fingerprint string
//		Fence       uint64          // the fence of the claim that holds or completed it
//		ClaimTTL    time.Duration   // the claim's remaining time (0 once expired or completed)
//		Expires     time.Duration   // the remaining retention
//		Outcome     Outcome         // the recorded result (when Completed)
//	}
type Record = driver.Record

// RecordState is the state of a live record as an operator sees it.
type RecordState = driver.RecordState

// Filter selects the records Admin.List returns.
type Filter = driver.Filter

// Settle names the record an operator settles: its ID and the fence it had
// when the operator inspected it.
type Settle = driver.Settle

// InProgressError is returned while an earlier request with the same key
// holds its claim. errors.Is(err, ErrInProgress) holds.
type InProgressError = driver.InProgressError

// Record states, for Filter.State and Record.State.
const (
	// AnyState (the zero value) matches every live record in a Filter.
	AnyState = driver.AnyState
	// StateInProgress: claimed, and the claim is live.
	StateInProgress = driver.StateInProgress
	// StateUnknown: claimed, and the claim expired without a recorded
	// result; the outcome is unknown until an operator settles it.
	StateUnknown = driver.StateUnknown
	// StateDone: a result (a value or a final error) is recorded.
	StateDone = driver.StateDone
)

// Limits on what Do and every Store accept. Input outside them is refused
// with an error wrapping ErrInvalid before anything is written.
const (
	// MaxKeyLen is the longest client key in bytes; keys are 1 to
	// MaxKeyLen bytes of printable ASCII.
	MaxKeyLen = driver.MaxKeyLen
	// MaxScopeLen is the longest scope in bytes; scopes are 1 to
	// MaxScopeLen bytes of valid UTF-8 without NUL.
	MaxScopeLen = driver.MaxScopeLen
	// MaxFingerprintLen is the longest fingerprint in bytes (visible
	// ASCII), such as the hex digest [Fingerprint] returns.
	MaxFingerprintLen = driver.MaxFingerprintLen
	// MaxTokenLen is the longest claim token in bytes.
	MaxTokenLen = driver.MaxTokenLen
	// MinTTL and MaxClaimTTL bound Options.ClaimTTL.
	MinTTL      = driver.MinTTL
	MaxClaimTTL = driver.MaxClaimTTL
	// MaxRetention bounds Options.Retention.
	MaxRetention = driver.MaxRetention
	// MaxMessageLen bounds the stored message of a final error; longer
	// messages are cut.
	MaxMessageLen = driver.MaxMessageLen
	// MaxListLimit bounds Filter.Limit.
	MaxListLimit = driver.MaxListLimit
	// DefaultListLimit is the Filter.Limit used when it is 0.
	DefaultListLimit = driver.DefaultListLimit
)

var (
	// ErrInvalid reports bad input: a key, scope, fingerprint, option or
	// argument out of range. Nothing was written.
	ErrInvalid = driver.ErrInvalid
	// ErrMismatch reports that the key was already used with other input
	// (another fingerprint). fn did not run.
	ErrMismatch = driver.ErrMismatch
	// ErrInProgress reports that an earlier request with the same key still
	// holds its claim. The error is an *InProgressError carrying how long
	// the claim has left. fn did not run.
	ErrInProgress = driver.ErrInProgress
	// ErrOutcomeUnknown reports that the outcome of an attempt is unknown.
	// The error is an *UnknownError.
	ErrOutcomeUnknown = driver.ErrOutcomeUnknown
	// ErrClaimLost reports that a claim is no longer held by its token: it
	// expired and a later attempt took it over (with a greater fence), or it
	// was released. Do returns an error wrapping ErrClaimLost, and the
	// later attempt's result stands.
	ErrClaimLost = driver.ErrClaimLost
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. fn does not run without a claim; the outcome of a write that
	// was sent is unknown.
	ErrUnavailable = driver.ErrUnavailable
	// ErrNotFound reports that there is no live record of the ID. Nothing
	// was changed.
	ErrNotFound = driver.ErrNotFound
	// ErrChanged reports that the record's fence is not the one given: the
	// record moved on since it was inspected. Nothing was changed.
	ErrChanged = driver.ErrChanged
	// ErrCompleted reports that the record already holds a result, which
	// an operator does not overwrite or drop. Nothing was changed.
	ErrCompleted = driver.ErrCompleted
)
