package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tenurekit/tenure/internal/jsonx"
)

// Limits on what a Store accepts. Every Store validates its input with
// [Validate] before its first write, so a bad key, token or TTL changes nothing.
const (
	// MaxKeyLen is the longest key in bytes.
	MaxKeyLen = 512
	// MaxTokenLen is the longest token in bytes.
	MaxTokenLen = 128
	// MinTTL is the shortest lease a Store grants.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease a Store grants. Longer work keeps a shorter
	// lease alive (see lease.Locker.Do) so that a dead holder frees it quickly.
	MaxTTL = 24 * time.Hour
	// MaxHolderLen is the longest holder description in bytes.
	MaxHolderLen = 128
)

var (
	// ErrHeld reports that another holder has the key. The error returned
	// is a *HeldError carrying the holder's remaining time.
	ErrHeld = errors.New("lease: held by another holder")
	// ErrNotHeld reports that the token does not hold the key (any more):
	// it expired, was released, or another holder took it.
	ErrNotHeld = kind.New("lease: not held", tenure.ErrLost)
	// ErrLost reports that a lease ended before its holder released it:
	// renewal failed or its validity ran out.
	ErrLost = kind.New("lease: lost", tenure.ErrLost)
	// ErrInvalid reports bad input (key, token or TTL). Nothing was written.
	ErrInvalid = kind.New("lease: invalid argument", tenure.ErrInvalid)
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. The outcome of a write that was sent is unknown: it may have
	// been applied. Writes are idempotent per token, so retrying with the same
	// token reconciles them.
	ErrUnavailable = kind.New("lease: store unavailable (outcome unknown)", tenure.ErrUnavailable)
)

// Store is the contract every backend implements. Stores judge expiry on
// their own clock (Redis TIME, PostgreSQL clock_timestamp(), etcd lease
// TTLs, the process owning a SQLite file or memory store), never the
// caller's.
//
// Implementations must validate arguments with [Validate] before writing,
// wrap transport failures in [ErrUnavailable], and be safe for concurrent
// use.
type Store interface {
	// Acquire grants key to token for ttl if key is free or its lease has
	// expired. The grant's fence is strictly greater than every fence granted
	// for key before, also after the store lost data (restart without
	// persistence), as each store documents. Re-acquiring with the token that
	// already holds key renews it for ttl and returns the same fence, so an
	// acquire whose reply was lost can be retried and reconciled. Busy:
	// a *HeldError (errors.Is(err, ErrHeld)).
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (Grant, error)
	// Renew extends the lease held by token to ttl from now (store clock).
	// ErrNotHeld if token does not hold key: an expired lease is never
	// brought back.
	Renew(ctx context.Context, key, token string, ttl time.Duration) (Grant, error)
	// Release ends the lease held by token. ErrNotHeld if token does not
	// hold key; the current holder, if any, is left untouched.
	Release(ctx context.Context, key, token string) error
	// Inspect reports the state of key without changing it.
	Inspect(ctx context.Context, key string) (Info, error)
}

// Grant is what a store returns when it grants or renews a lease.
type Grant struct {
	// Fence is the fencing token of this tenure: strictly greater than every
	// fence granted for the key before. Renewals keep it.
	Fence uint64
	// TTL is the time the store really granted, counted from no earlier
	// than when the store received the request: from when it applied it,
	// or, for a store that measures how long the request waited inside it
	// before being applied (sqlitestore's write queue), from its arrival,
	// with that wait added. The holder's validity runs from the request's
	// send time, so either way it ends no later than the store's expiry. It
	// may exceed the requested TTL where a store rounds up (etcd grants
	// whole seconds and has a minimum) or adds the wait.
	TTL time.Duration
}

// Info describes a key as the store sees it.
type Info struct {
	Key string
	// Held reports whether a lease on Key is in force now.
	Held bool
	// Fence is the current holder's fence, or the last one granted while the
	// store still remembers it (0 if none).
	Fence uint64
	// TTL is the holder's remaining time (0 when not held).
	TTL time.Duration
	// Holder is the description the current holder gave when it acquired
	// the key (see HolderAcquirer; "" when not held or not given). It is
	// never the token.
	Holder string
}

// HeldError is returned by Acquire when another holder has the key.
type HeldError struct {
	Key string
	// TTL is the holder's remaining time as the store sees it.
	TTL time.Duration
	// Holder is the holder's description, as Info.Holder ("" when the
	// store keeps none or the holder gave none).
	Holder string
	// Position is how many live waiters are ahead of the caller in the
	// key's queue (Queuer; 0 from a store without one). A free key that
	// is promised to a waiter ahead is refused with TTL 0.
	Position int
}

func (e *HeldError) Error() string {
	if e.TTL == 0 && e.Position > 0 {
		return fmt.Sprintf("lease: %q is promised to a waiter ahead (%d ahead)", e.Key, e.Position)
	}
	if e.Holder != "" {
		return fmt.Sprintf("lease: %q held by another holder (%q) for %v", e.Key, e.Holder, e.TTL)
	}
	return fmt.Sprintf("lease: %q held by another holder for %v", e.Key, e.TTL)
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// HolderAcquirer is implemented by stores that keep a short description of
// the holder with each grant (every store tenure ships). lease.Locker uses it
// when the store has it, with lease.Options.Holder; Inspect, List and HeldError
// then report the description, so an operator can tell who holds a key.
type HolderAcquirer interface {
	// AcquireHolder is Acquire that also stores holder (validated with
	// ValidateHolder; "" keeps none) with the grant. Re-acquiring with the
	// holding token replaces the description. Renew keeps it; Release and
	// expiry end it.
	AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (Grant, error)
}

// AcquireAs acquires key on s with a holder description when s keeps one
// (HolderAcquirer), and with a plain Acquire otherwise.
func AcquireAs(ctx context.Context, s Store, key, token string, ttl time.Duration, holder string) (Grant, error) {
	if h, ok := s.(HolderAcquirer); ok {
		return h.AcquireHolder(ctx, key, token, ttl, holder)
	}
	return s.Acquire(ctx, key, token, ttl)
}

// ValidateHolder checks a holder description: at most MaxHolderLen bytes
// of printable UTF-8 (letters, marks, numbers, punctuation, symbols and
// the ASCII space; no control characters). "" is valid and means none.
// Errors wrap ErrInvalid.
func ValidateHolder(holder string) error {
	if len(holder) > MaxHolderLen {
		return fmt.Errorf("%w: holder is %d bytes, longer than %d", ErrInvalid, len(holder), MaxHolderLen)
	}
	if !utf8.ValidString(holder) {
		return fmt.Errorf("%w: holder is not valid UTF-8", ErrInvalid)
	}
	for _, r := range holder {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: holder contains the unprintable character %U", ErrInvalid, r)
		}
	}
	return nil
}

// Validate checks a key, token and TTL as every Store must before writing
// (Acquire, Renew). Errors wrap ErrInvalid and never contain the token.
func Validate(key, token string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}

// ValidateToken checks a token: 1 to MaxTokenLen bytes of visible ASCII
// (what lease.NewToken makes, and what every store can keep as text). The error
// never contains the token.
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

// ValidateTTL checks a TTL: MinTTL to MaxTTL.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v out of range [%v, %v]", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateKey checks a key: 1 to MaxKeyLen bytes of valid UTF-8 without NUL.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w: key contains NUL", ErrInvalid)
		}
	}
	return nil
}

// NextFence returns the fence to grant after last at store time now: one more
// than last, but never below now in microseconds since the Unix epoch. A
// store that lost its counter (a restart without persistence) therefore
// still grants fences above every fence it granted before, provided its
// clock did not go back by more than the counter ran ahead of it. Stores
// whose fences come from elsewhere (etcd revisions) do not use it.
func NextFence(last uint64, now time.Time) uint64 {
	floor := uint64(max(now.UnixMicro(), 0))
	return max(last+1, floor)
}

// MarshalJSON writes the grant as {"fence":…,"ttl":"30s"}.
func (g Grant) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Fence uint64 `json:"fence"`
		TTL   string `json:"ttl,omitempty"`
	}{g.Fence, jsonx.Duration(g.TTL)})
}

// MarshalJSON writes the state as
// {"key":…,"held":…,"fence":…,"ttl":"12.5s","holder":…}, the TTL as a
// duration string and left out when not held, the holder left out when
// empty.
func (i Info) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Key    string `json:"key"`
		Held   bool   `json:"held"`
		Fence  uint64 `json:"fence"`
		TTL    string `json:"ttl,omitempty"`
		Holder string `json:"holder,omitempty"`
	}{i.Key, i.Held, i.Fence, jsonx.Duration(i.TTL), i.Holder})
}

// MaxListLimit is the most keys one List call returns.
const MaxListLimit = 1000

// Lister is implemented by stores that can list the keys they hold
// (memstore, sqlitestore, pgstore, redisstore, etcdstore). It is optional: a Store without it still meets
// the contract, and callers check for it with a type assertion.
type Lister interface {
	// List returns the state of the keys that start with prefix and sort
	// after after (byte order; "" starts at the first), in key order, at
	// most limit of them (1 to MaxListLimit). A key appears while the store
	// remembers it: held, or released or expired with its last fence.
	List(ctx context.Context, prefix, after string, limit int) ([]Info, error)
}

// ValidateList checks the arguments of Lister.List. Errors wrap ErrInvalid.
func ValidateList(prefix, after string, limit int) error {
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d out of range [1, %d]", ErrInvalid, limit, MaxListLimit)
	}
	if len(prefix) > MaxKeyLen || len(after) > MaxKeyLen {
		return fmt.Errorf("%w: list prefix or start longer than %d bytes", ErrInvalid, MaxKeyLen)
	}
	return nil
}
