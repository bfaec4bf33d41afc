package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/internal/jsonx"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure/internal/secret"
)

// Token is a claim's secret token. Every formatting path (fmt verbs at any
// depth, log/slog, encoding/json and other text encoders) prints it as
// "REDACTED"; only Reveal gives the text, for a Store to send or compare.
// The zero Token is empty. Get one from NewToken.
type Token = secret.Text

// Limits on what Do and every Store accept. Input outside them is refused
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
	// as the hex digest [Fingerprint] returns.
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
	ErrInvalid = errors.New("idempotency: invalid argument")
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
	// was released. A completion under a lost claim is refused; Do returns
	// an error wrapping ErrClaimLost, and the later attempt's result stands.
	ErrClaimLost = errors.New("idempotency: claim lost to a later attempt")
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. fn does not run without a claim; the outcome of a write that
	// was sent is unknown.
	ErrUnavailable = errors.New("idempotency: store unavailable")
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

// UnknownError reports an outcome that is unknown. errors.Is(err,
// ErrOutcomeUnknown) holds, and Unwrap returns the cause (a store error,
// which may wrap ErrUnavailable), if any.
type UnknownError struct {
	Scope, Key string
	// Fence is the fence of the attempt whose outcome is unknown.
	Fence uint64
	// Ran reports whether this call ran fn (its result could not be
	// recorded); false means an earlier attempt's claim was abandoned.
	Ran bool
	// Err is the cause, if any.
	Err error
}

// Error describes the error.
func (e *UnknownError) Error() string {
	if e.Ran {
		msg := fmt.Sprintf("idempotency: key %q in scope %q: fn ran (fence %d) but its result could not be recorded; the outcome is unknown", e.Key, e.Scope, e.Fence)
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
		return msg
	}
	return fmt.Sprintf("idempotency: key %q in scope %q: an earlier attempt (fence %d) ended without recording a result; its outcome is unknown (reconcile, then use Recover)", e.Key, e.Scope, e.Fence)
}

// Is reports whether target is ErrOutcomeUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the cause.
func (e *UnknownError) Unwrap() error { return e.Err }

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

// Store is the contract every backend implements. Each call is one atomic
// step judged on the store's own clock (Redis TIME, PostgreSQL
// clock_timestamp(), the process owning a SQLite file or memory store).
// Implementations validate their input with the Validate functions before
// writing, wrap transport failures in ErrUnavailable, and are safe for
// concurrent use.
type Store interface {
	// Begin claims b.ID for b.Token, or answers from the live record:
	//
	//   - no live record (none, released, or retention over): Claimed, with
	//     a fence above every fence granted for the ID before;
	//   - another fingerprint: Mismatch;
	//   - completed: Completed with its outcome;
	//   - claimed by b.Token: Claimed again, same fence, claim renewed (so a
	//     Begin whose reply was lost can be sent again);
	//   - claimed by another token, claim live: InProgress;
	//   - claimed by another token, claim expired: with b.Takeover, Claimed
	//     with a new, greater fence; otherwise Abandoned.
	Begin(ctx context.Context, b Begin) (Begun, error)
	// Renew extends the claim held by token with fence to ttl from now.
	// ErrClaimLost if the claim is not held by token and fence, or expired:
	// an expired claim is never renewed.
	Renew(ctx context.Context, id ID, token string, fence uint64, ttl time.Duration) error
	// Complete records out for the claim held by token with fence, and
	// keeps the record for retention from now. It is accepted while no
	// other attempt took the claim over, also after the claim expired;
	// ErrClaimLost otherwise. Completing again with the same token and
	// fence changes nothing and succeeds (a Complete whose reply was lost
	// can be sent again).
	Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error
	// Release drops the claim held by token (the record no longer exists;
	// the next Begin claims it anew). ErrClaimLost if token holds no claim
	// on id: a completed record is never released.
	Release(ctx context.Context, id ID, token string) error
	// Inspect reports the record of id without changing it.
	Inspect(ctx context.Context, id ID) (Record, error)
}

// Tx is the transactional form of a SQL store, bound to one of the caller's
// transactions (see [Keeper.DoTx]): the record is written in that
// transaction and commits or rolls back with the caller's own rows. SQL
// stores return one from a transaction (pgstore.Store.IdempotencyTx,
// sqlitestore.Store.IdempotencyTx).
type Tx interface {
	// Claim is Begin inside the transaction. A concurrent transaction that
	// has claimed the same ID and not yet ended makes Claim wait until it
	// commits (then Claim answers from its record) or rolls back (then
	// Claim claims). After a Claimed answer the store marks a savepoint, so
	// that Undo can roll back what the caller writes after it.
	Claim(ctx context.Context, b Begin) (Begun, error)
	// Undo rolls the transaction back to the savepoint Claim marked: the
	// claim stays, the caller's writes since are gone.
	Undo(ctx context.Context) error
	// Complete is Store.Complete inside the transaction.
	Complete(ctx context.Context, id ID, token string, fence uint64, out Outcome, retention time.Duration) error
	// Release is Store.Release inside the transaction.
	Release(ctx context.Context, id ID, token string) error
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
