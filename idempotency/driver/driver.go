// Package driver is what an idempotency store's writer needs and a user of
// package idempotency does not: the Store contract's request and answer
// types (Begin, Begun, State), the checks every store runs on its input
// before writing (the Validate functions), and the rules stores share
// (NextFence, SettleError).
//
// The types both sides name (ID, Outcome, Record, Filter, Settle,
// RecordState, InProgressError) and the sentinel errors are defined here
// once; package idempotency gives them to its users under the same names,
// as aliases, so errors.Is(err, idempotency.ErrInvalid) holds for an error
// wrapping driver.ErrInvalid.
package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure/internal/jsonx"
	"github.com/tenurekit/tenure/internal/secret"
)

// Token is a claim's secret token. Every formatting path (fmt verbs at any
// depth, log/slog, encoding/json and other text encoders) prints it as
// "REDACTED"; only Reveal gives the text, for a Store to send or compare.
type Token = secret.Text

// Limits on what Keeper.Do and every Store accept. Input outside them is refused
// with an error wrapping ErrInvalid before anything is written.
const (
	// MaxKeyLen is the longest client key in bytes (as the IETF draft and
	// Stripe allow). Keys are 1 to MaxKeyLen bytes of printable ASCII
	// (0x20 to 0x7E).
	MaxKeyLen = 255
	// MaxScopeLen is the longest scope in bytes. Scopes are 1 to
	// MaxScopeLen bytes of valid UTF-8 without NUL.
	MaxScopeLen = 512
	// MaxFingerprintLen is the longest fingerprint in bytes. Fingerprints
	// are 0 to MaxFingerprintLen bytes of visible ASCII (0x21 to 0x7E), such
	// as the hex digest idempotency.Fingerprint returns.
	MaxFingerprintLen = 256
	// MaxTokenLen is the longest claim token in bytes (visible ASCII).
	MaxTokenLen = 128
	// MinTTL and MaxClaimTTL bound Options.ClaimTTL.
	MinTTL      = time.Millisecond
	MaxClaimTTL = 24 * time.Hour
	// MaxRetention bounds Options.Retention.
	MaxRetention = 366 * 24 * time.Hour
	// MaxMessageLen bounds the stored message of a final error; longer
	// messages are cut.
	MaxMessageLen = 4096
)

var (
	// ErrInvalid reports bad input: a key, scope, fingerprint, option or
	// argument out of range. Nothing was written.
	ErrInvalid = kind.New("idempotency: invalid argument", tenure.ErrInvalid)
	// ErrMismatch reports that the key was already used with other input
	// (another fingerprint). fn did not run.
	ErrMismatch = errors.New("idempotency: key reused with different input")
	// ErrInProgress reports that an earlier request with the same key still
	// holds its claim. The error is an *InProgressError carrying how long
	// the claim has left. fn did not run.
	ErrInProgress = errors.New("idempotency: an earlier request with this key is in progress")
	// ErrOutcomeUnknown reports that the outcome of an attempt is unknown:
	// an earlier attempt's claim expired without a recorded result (its
	// executor crashed or stalled, and may or may not have applied its
	// effect), or this attempt's fn ran but its result could not be
	// recorded. The error is an *UnknownError.
	ErrOutcomeUnknown = errors.New("idempotency: the outcome of an attempt is unknown")
	// ErrClaimLost reports that a claim is no longer held by its token: it
	// expired and a later attempt took it over (with a greater fence), or it
	// was released. A completion under a lost claim is refused; Keeper.Do returns
	// an error wrapping ErrClaimLost, and the later attempt's result stands.
	ErrClaimLost = kind.New("idempotency: claim lost to a later attempt", tenure.ErrLost)
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. fn does not run without a claim; the outcome of a write that
	// was sent is unknown.
	ErrUnavailable = kind.New("idempotency: store unavailable", tenure.ErrUnavailable)
)

// InProgressError is returned while an earlier request with the same key
// holds its claim. errors.Is(err, ErrInProgress) holds.
type InProgressError struct {
	Scope, Key string
	// RetryAfter is the claim's remaining time on the store's clock: the
	// longest a retry has to wait to see a result or an abandoned claim.
	RetryAfter time.Duration
}

// Error describes the error.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency: key %q in scope %q is in progress (claim ends within %v)", e.Key, e.Scope, e.RetryAfter)
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// ID names one idempotency record: a scope and a client key.
type ID struct {
	// Scope is who and what: the principal and the operation (for HTTP,
	// the authenticated principal and the route). Equal keys in different
	// scopes are different records.
	Scope string
	// Key is the client's idempotency key.
	Key string
}

// Begin is a Store's Begin request: claim the record of ID for Token unless
// a live record answers the request.
type Begin struct {
	ID
	// Fingerprint is the digest of the request's input.
	Fingerprint string
	// Token is the attempt's random claim token (new for every attempt).
	// It prints as REDACTED; a Store reads it with Token.Reveal().
	Token Token
	// ClaimTTL is how long the claim lasts unless renewed.
	ClaimTTL time.Duration
	// Retention is how long the record is kept at least, counted from the
	// claim (and again from completion).
	Retention time.Duration
	// Takeover lets the call take over an abandoned claim (one that expired
	// without a result) with a new fence.
	Takeover bool
}

// State is a Store's answer to Begin.
type State int

const (
	// Claimed: the caller holds the claim (a new record, a record whose
	// retention ended, a released one, an abandoned claim taken over, or
	// a claim this token already held). Begun.Fence and Begun.TTL are set.
	Claimed State = iota + 1
	// Completed: the record holds a result for the same fingerprint.
	// Begun.Outcome is set.
	Completed
	// InProgress: another live claim with the same fingerprint. Begun.TTL
	// is its remaining time.
	InProgress
	// Abandoned: a claim with the same fingerprint expired without a
	// result, and Takeover was not asked for. Begun.Fence is its fence.
	Abandoned
	// Mismatch: the live record has another fingerprint.
	Mismatch
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Completed:
		return "completed"
	case InProgress:
		return "in-progress"
	case Abandoned:
		return "abandoned"
	case Mismatch:
		return "mismatch"
	}
	return fmt.Sprintf("idempotency.State(%d)", int(s))
}

// Begun is a Store's answer to Begin.
type Begun struct {
	State State
	// Fence: Claimed, the claim's fence, strictly greater than every fence
	// granted for the ID before (as each store documents); Abandoned, the
	// abandoned claim's fence.
	Fence uint64
	// TTL: Claimed, the claim time granted; InProgress, the holder's
	// remaining time.
	TTL time.Duration
	// Outcome: Completed, the recorded result.
	Outcome Outcome
}

// Outcome is a recorded result.
type Outcome struct {
	// Value is what fn returned.
	Value []byte
	// Failed marks a final error; Message is its text.
	Failed  bool
	Message string
}

// Record is what a store holds for an ID, as Inspect reports it.
type Record struct {
	ID
	// Exists is false when there is no live record: none was written, it
	// was released, or its retention ended on the store's clock.
	Exists bool
	// Completed is true once a result is recorded; false while claimed.
	Completed   bool
	Fingerprint string
	// Fence is the fence of the claim that holds or completed the record.
	Fence uint64
	// ClaimTTL is the claim's remaining time (0 once it expired, or when
	// completed).
	ClaimTTL time.Duration
	// Expires is the remaining retention: the record is forgotten after it
	// (a claimed record not before its claim ends).
	Expires time.Duration
	// Outcome is the recorded result (when Completed).
	Outcome Outcome
}

// ValidateID checks a scope and key. Errors wrap ErrInvalid.
func ValidateID(id ID) error {
	switch s := id.Scope; {
	case s == "":
		return fmt.Errorf("%w: empty scope", ErrInvalid)
	case len(s) > MaxScopeLen:
		return fmt.Errorf("%w: scope is %d bytes, longer than %d", ErrInvalid, len(s), MaxScopeLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: scope is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(id.Scope); i++ {
		if id.Scope[i] == 0 {
			return fmt.Errorf("%w: scope contains NUL", ErrInvalid)
		}
	}
	return ValidateKey(id.Key)
}

// ValidateKey checks a client key: 1 to MaxKeyLen bytes of printable ASCII.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key must be 1 to %d bytes, got %d", ErrInvalid, MaxKeyLen, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: key byte %d is not printable ASCII", ErrInvalid, i)
		}
	}
	return nil
}

// ValidateFingerprint checks a fingerprint: 0 to MaxFingerprintLen bytes of
// visible ASCII.
func ValidateFingerprint(fp string) error {
	if len(fp) > MaxFingerprintLen {
		return fmt.Errorf("%w: fingerprint is %d bytes, longer than %d", ErrInvalid, len(fp), MaxFingerprintLen)
	}
	for i := 0; i < len(fp); i++ {
		if c := fp[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: fingerprint must be visible ASCII", ErrInvalid)
		}
	}
	return nil
}

// ValidateToken checks a claim token: 1 to MaxTokenLen bytes of visible
// ASCII. The error never contains the token.
func ValidateToken(token string) error {
	if token == "" || len(token) > MaxTokenLen {
		return fmt.Errorf("%w: token must be 1 to %d bytes", ErrInvalid, MaxTokenLen)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: token must be visible ASCII", ErrInvalid)
		}
	}
	return nil
}

// ValidateClaimTTL checks a claim TTL: MinTTL to MaxClaimTTL.
func ValidateClaimTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxClaimTTL {
		return fmt.Errorf("%w: claim TTL %v out of range [%v, %v]", ErrInvalid, ttl, MinTTL, MaxClaimTTL)
	}
	return nil
}

// ValidateRetention checks a retention: MinTTL to MaxRetention.
func ValidateRetention(d time.Duration) error {
	if d < MinTTL || d > MaxRetention {
		return fmt.Errorf("%w: retention %v out of range [%v, %v]", ErrInvalid, d, MinTTL, MaxRetention)
	}
	return nil
}

// ValidateFence checks a fence: 1 to math.MaxInt64 (what SQL stores keep).
func ValidateFence(f uint64) error {
	if f == 0 || f > math.MaxInt64 {
		return fmt.Errorf("%w: fence %d out of range [1, %d]", ErrInvalid, f, int64(math.MaxInt64))
	}
	return nil
}

// ValidateBegin checks everything in a Begin request.
func ValidateBegin(b Begin) error {
	if err := ValidateID(b.ID); err != nil {
		return err
	}
	if err := ValidateFingerprint(b.Fingerprint); err != nil {
		return err
	}
	if err := ValidateToken(b.Token.Reveal()); err != nil {
		return err
	}
	if err := ValidateClaimTTL(b.ClaimTTL); err != nil {
		return err
	}
	return ValidateRetention(b.Retention)
}

// ValidateClaim checks the arguments of Renew, Complete and Release (fence 0
// is accepted by Release, which matches on the token alone).
func ValidateClaim(id ID, token string, fence uint64) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	return ValidateFence(fence)
}

// NextFence returns the fence of a new claim after last at store time now:
// one more than last, but never below now in microseconds since the Unix
// epoch, so a store that forgot a record (released, expired, lost) still
// grants a greater fence than before as long as its clock did not go back.
func NextFence(last uint64, now time.Time) uint64 {
	return max(last+1, uint64(max(now.UnixMicro(), 0)))
}

// MarshalJSON writes the record with durations as strings and the
// recorded value's size instead of the value (it may be private):
// {"scope":…,"key":…,"exists":true,"completed":true,"fence":…,
// "expires":"23h59m0s","failed":false,"value_bytes":17}.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Scope       string `json:"scope"`
		Key         string `json:"key"`
		Exists      bool   `json:"exists"`
		Completed   bool   `json:"completed"`
		Fingerprint string `json:"fingerprint,omitempty"`
		Fence       uint64 `json:"fence,omitempty"`
		ClaimTTL    string `json:"claim_ttl,omitempty"`
		Expires     string `json:"expires,omitempty"`
		Failed      bool   `json:"failed,omitempty"`
		Message     string `json:"message,omitempty"`
		ValueBytes  int    `json:"value_bytes"`
	}{r.Scope, r.Key, r.Exists, r.Completed, r.Fingerprint, r.Fence, jsonx.Duration(r.ClaimTTL),
		jsonx.Duration(r.Expires), r.Outcome.Failed, r.Outcome.Message, len(r.Outcome.Value)})
}

// Operators settle records whose outcome is unknown through idempotency.Admin. An
// operator holds no claim token, so every change is guarded by the fence
// of the record the operator inspected: a compare-and-set that refuses
// when another attempt claimed the record since.
var (
	// ErrNotFound reports that there is no live record of the ID (never
	// written, released, or past its retention). Nothing was changed.
	ErrNotFound = kind.New("idempotency: no such record", tenure.ErrNotFound)
	// ErrChanged reports that the record's fence is not the one given: the
	// record moved on (another attempt claimed it) since it was
	// inspected. Nothing was changed; inspect it again.
	ErrChanged = kind.New("idempotency: the record changed since it was inspected (its fence moved)", tenure.ErrConflict)
	// ErrCompleted reports that the record already holds a result, which
	// an operator does not overwrite or drop. Nothing was changed.
	ErrCompleted = errors.New("idempotency: the record already holds a result")
)

// MaxListLimit bounds Filter.Limit.
const MaxListLimit = 10000

// DefaultListLimit is the Filter.Limit used when it is 0.
const DefaultListLimit = 100

// RecordState is the state of a live record as an operator sees it.
type RecordState int

const (
	// AnyState (the zero value) matches every live record in a Filter.
	AnyState RecordState = iota
	// StateInProgress: claimed, and the claim is live (an executor is
	// running, or was until very recently).
	StateInProgress
	// StateUnknown: claimed, and the claim expired without a recorded
	// result; the outcome is unknown until an operator settles it.
	StateUnknown
	// StateDone: a result (a value or a final error) is recorded.
	StateDone
)

// String returns the state's name: "any", "in-progress", "unknown" or
// "done".
func (s RecordState) String() string {
	switch s {
	case AnyState:
		return "any"
	case StateInProgress:
		return "in-progress"
	case StateUnknown:
		return "unknown"
	case StateDone:
		return "done"
	}
	return fmt.Sprintf("idempotency.RecordState(%d)", int(s))
}

// State returns the record's state: StateDone when completed, else
// StateInProgress while its claim is live and StateUnknown after. A record
// that does not exist has AnyState.
func (r Record) State() RecordState {
	switch {
	case !r.Exists:
		return AnyState
	case r.Completed:
		return StateDone
	case r.ClaimTTL > 0:
		return StateInProgress
	}
	return StateUnknown
}

// Filter selects the records Admin.List returns.
type Filter struct {
	// State keeps only records in this state. Default AnyState.
	State RecordState
	// ScopePrefix keeps only records whose scope starts with it (bytes).
	// Default "": every scope.
	ScopePrefix string
	// Limit is the most records returned. Default (0) DefaultListLimit;
	// 1 to MaxListLimit.
	Limit int
}

// ValidateFilter checks a filter and returns it with the default limit
// filled in. Errors wrap ErrInvalid.
func ValidateFilter(f Filter) (Filter, error) {
	if f.State < AnyState || f.State > StateDone {
		return f, fmt.Errorf("%w: unknown record state %d", ErrInvalid, int(f.State))
	}
	if f.Limit == 0 {
		f.Limit = DefaultListLimit
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return f, fmt.Errorf("%w: list limit %d out of range [1, %d]", ErrInvalid, f.Limit, MaxListLimit)
	}
	if len(f.ScopePrefix) > MaxScopeLen {
		return f, fmt.Errorf("%w: scope prefix is %d bytes, longer than %d", ErrInvalid, len(f.ScopePrefix), MaxScopeLen)
	}
	return f, nil
}

// Match reports whether the live record r passes f's state and scope
// prefix (not its limit).
func (f Filter) Match(r Record) bool {
	if !r.Exists || len(r.Scope) < len(f.ScopePrefix) || r.Scope[:len(f.ScopePrefix)] != f.ScopePrefix {
		return false
	}
	return f.State == AnyState || r.State() == f.State
}

// Settle names the record an operator settles: its ID and the fence it had
// when the operator inspected it.
type Settle struct {
	ID
	// Fence is the record's fence as inspected (Record.Fence). The change
	// is refused with ErrChanged if the record's fence is another one.
	Fence uint64
	// Force settles the record even while its claim is live: the running
	// executor loses its claim (its renewal and completion are refused
	// with ErrClaimLost). Default false: a live claim is refused with an
	// *InProgressError.
	Force bool
}

// ValidateSettle checks a Settle: its ID and a fence in range. Errors wrap
// ErrInvalid.
func ValidateSettle(s Settle) error {
	if err := ValidateID(s.ID); err != nil {
		return err
	}
	return ValidateFence(s.Fence)
}

// SettleError returns the error Admin reports for a record r that cannot
// be settled as s asks, or nil if it can: ErrNotFound, ErrChanged,
// ErrCompleted or an *InProgressError (with the claim's remaining time),
// in that order. Stores call it on the record they read in the same
// atomic step as the change.
func SettleError(s Settle, r Record) error {
	switch {
	case !r.Exists:
		return fmt.Errorf("%w: key %q in scope %q", ErrNotFound, s.Key, s.Scope)
	case r.Fence != s.Fence:
		return fmt.Errorf("%w: key %q in scope %q has fence %d, not %d", ErrChanged, s.Key, s.Scope, r.Fence, s.Fence)
	case r.Completed:
		return fmt.Errorf("%w: key %q in scope %q", ErrCompleted, s.Key, s.Scope)
	case r.ClaimTTL > 0 && !s.Force:
		return &InProgressError{Scope: s.Scope, Key: s.Key, RetryAfter: r.ClaimTTL}
	}
	return nil
}

// CleanMessage returns msg as stores keep it: valid UTF-8 without NUL, cut
// to MaxMessageLen bytes at a character boundary.
func CleanMessage(msg string) string {
	msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
	if len(msg) <= MaxMessageLen {
		return msg
	}
	n := MaxMessageLen
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n]
}
