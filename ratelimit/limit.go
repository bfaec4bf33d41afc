package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Bounds on what a Limit, a key and a cost may be (the same as package
// driver's). Every store keeps its arithmetic exact within them, so they
// are checked before anything is written.
const (
	// MaxRate is the largest Rate and Burst.
	MaxRate = driver.MaxRate
	// MaxLogRate is the largest Rate of a SlidingLog limit, which keeps one
	// entry per admitted unit.
	MaxLogRate = driver.MaxLogRate
	// MinPeriod is the shortest Period.
	MinPeriod = driver.MinPeriod
	// MaxPeriod is the longest Period, and the longest time a GCRA bucket
	// may take to refill from empty (Period × Burst / Rate).
	MaxPeriod = driver.MaxPeriod
	// MaxKeyLen is the longest key in bytes.
	MaxKeyLen = driver.MaxKeyLen
	// MaxNameLen is the longest limit or group name in bytes.
	MaxNameLen = driver.MaxNameLen
	// MaxGroup is the most limits one decision checks together.
	MaxGroup = driver.MaxGroup
)

// Bounds on concurrency limits.
const (
	// MaxPermits is the largest ConcurrencyLimit.Permits.
	MaxPermits = driver.MaxPermits
	// MinPermitTTL and MaxPermitTTL bound ConcurrencyLimit.TTL.
	MinPermitTTL = driver.MinPermitTTL
	MaxPermitTTL = driver.MaxPermitTTL
)

var (
	// ErrInvalid reports a bad limit, key, name or cost. Nothing was
	// written. Stores' checks (package driver) return the same error.
	ErrInvalid = driver.ErrInvalid
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. A decision that was sent may have been applied (units may
	// have been consumed). The HTTP middleware turns it into its failure
	// policy; it is never reported as "allowed".
	ErrUnavailable = driver.ErrUnavailable
	// ErrLimited reports that a concurrency limit has no free permit. The
	// error is a *LimitedError carrying when one may free up.
	ErrLimited = errors.New("ratelimit: no permit available")
	// ErrPermitLost reports that a permit is no longer held: it expired
	// (its holder did not renew it in time) or was released.
	ErrPermitLost = driver.ErrPermitLost
)

// Algorithm selects how a Limit is enforced (GCRA, FixedWindow, SlidingLog
// or SlidingWindow). The zero value is GCRA. It is package driver's type,
// shared with the stores.
type Algorithm = driver.Algorithm

// The algorithms; see package driver for the details of each.
const (
	// GCRA is the generic cell rate algorithm: a token bucket that holds
	// Burst units and refills Rate units per Period, kept as one
	// timestamp. Exact, O(1) state, and an exact RetryAfter. The default.
	GCRA = driver.GCRA
	// FixedWindow admits Rate units per window of Period, the window
	// starting with the first admitted request. Up to twice Rate can pass
	// around a window boundary.
	FixedWindow = driver.FixedWindow
	// SlidingLog admits at most Rate units in every interval of length
	// Period, exactly (Rate up to MaxLogRate).
	SlidingLog = driver.SlidingLog
	// SlidingWindow is the sliding window counter (two buckets, the
	// previous one weighted): constant memory, approximate.
	SlidingWindow = driver.SlidingWindow
)

// Limit is a quota (package driver's Limit, where each field's bounds and
// default are documented):
//
//	type Limit struct {
//		Name   string        // separates limits on the same keys; default derived from the rest
//		Rate   int           // units admitted per Period
//		Period time.Duration // MinPeriod to MaxPeriod, whole microseconds
//		Burst  int           // GCRA's bucket size; default Rate; 0 or Rate for the windows
//	}
type Limit = driver.Limit

// Decision is the outcome of a request (package driver's Decision, which
// stores fill):
//
//	type Decision struct {
//		Allowed    bool          // the units were admitted (for a peek: would be)
//		Remaining  int           // units the limit would still admit now
//		RetryAfter time.Duration // denied: until the same request would pass; 0 when allowed
//		ResetAfter time.Duration // until the limit is fully available again
//		Limit      Limit         // the limit judged, defaults filled in
//		Algorithm  Algorithm     // the algorithm that judged it
//		At         time.Time     // the store's clock when it decided (µs)
//	}
type Decision = driver.Decision

// HashedKeyPrefix starts every key NormalizeKey replaced by a hash.
const HashedKeyPrefix = "~h:"

// NormalizeKey returns key if it is valid (see ValidateKey) and does not
// start with HashedKeyPrefix; otherwise it returns HashedKeyPrefix followed
// by 32 hex digits of the SHA-256 of key's bytes. The result is always a
// valid key, and distinct inputs give distinct results (up to a SHA-256
// collision): a key that was kept cannot start with the prefix every
// replaced key starts with. The HTTP middleware applies it to every key a
// KeyFunc returns, so a request whose key would be invalid as-is (a path
// with bytes that are not UTF-8 or with NUL, a path or user id longer than
// MaxKeyLen) is still limited, under the hashed key.
func NormalizeKey(key string) string {
	if driver.ValidateKey(key) == nil && !strings.HasPrefix(key, HashedKeyPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return HashedKeyPrefix + hex.EncodeToString(sum[:16])
}
