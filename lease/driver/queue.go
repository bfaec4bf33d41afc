package driver

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Queuer is implemented by stores that serve the waiters of a key in
// arrival order (fair hand-off). lease.Locker's Acquire uses it when the
// store has it, unless lease.Options.Unfair is set.
//
// A waiter keeps a place in the key's queue: the first AcquireQueued that
// finds the key held (or promised to a waiter ahead) queues the token
// behind the waiters already there; later calls with the same token keep
// its place and extend its stay. A key that is free is granted only to
// the first live waiter in its queue, or to any caller when the queue is
// empty: a newcomer, queued or not (a plain Acquire), never overtakes a
// waiter. A place not kept (no AcquireQueued with its token) within stay
// of the last call is dropped, so a waiter that crashed holds up the ones
// behind it for at most stay. A grant removes the token from the queue.
type Queuer interface {
	// AcquireQueued is AcquireHolder (holder "" keeps none) for a waiter:
	// it grants key to token if key is free and token is first among the
	// live waiters (or none wait); otherwise it queues token, or keeps and
	// extends its place, for stay (1ms to MaxTTL), and returns a
	// *HeldError whose Position says how many live waiters are ahead of
	// token (its TTL is 0 when the key is free but promised to a waiter
	// ahead).
	AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (Grant, error)
	// Leave gives token's place in key's queue up (a waiter whose context
	// ended). Leaving a queue one is not in is not an error.
	Leave(ctx context.Context, key, token string) error
}

// Waker is implemented by stores that can tell waiters that a key may
// have become free: released, or, where the store can tell, expired.
// lease.Locker's Acquire waits on it between attempts, with polling at
// the holder's remaining TTL as the fallback that bounds a missed
// wake-up.
type Waker interface {
	// Watch returns a channel that receives whenever key may have become
	// free, until stop is called. Each wake-up names the waiter that is
	// now first in the key's queue (WaiterID of its token), or is "" when
	// any waiter may try: a waiter named by none waits on, so a release
	// wakes one waiter, not all. waiter is the watching waiter's own
	// WaiterID, and the channel receives only the wake-ups that name it
	// or none; with waiter "" (a watcher outside the queue) it receives
	// every wake-up. So a release wakes one goroutine of a process, not
	// each of its waiters for the key. The channel has a buffer and is
	// never closed; a wake-up may be spurious, and one lost (the buffer
	// full, the connection down) is made good by the caller's polling. A
	// store that cannot watch now returns an error, and the caller polls.
	Watch(ctx context.Context, key, waiter string) (wake <-chan string, stop func(), err error)
}

// Handover is implemented by queueing stores (Queuer, Waker) whose
// release can hand a free key straight to the first live waiter in its
// queue, in the release's own write, instead of freeing the key and
// waking the waiter to take it: one write a hand-off where there were
// two. lease.Locker's Acquire uses it for a waiter that watches the key.
type Handover interface {
	// AcquireHandover is AcquireQueued for a waiter that watches key
	// (Waker.Watch) on this store; attempt numbers the waiter's calls
	// (each call a new number). While token keeps its place, a release
	// may grant key to it, keeping holder, and wake it with a wake-up
	// that carries the grant (GrantWake): the fence, and the attempt
	// whose place the release found. The grant runs for ttl from that
	// attempt's time on the store, so the lease's validity counts from
	// when that attempt was sent, as an AcquireQueued granted by that
	// attempt would.
	//
	// The store hands the key only to a waiter whose wake-ups it can
	// still deliver, so that a waiter whose process ended is never
	// granted the key: that one is woken instead, as by AcquireQueued,
	// and its place expires after stay. A waiter that misses the wake-up
	// finds the key its own at its next attempt, which keeps the fence
	// (the same token). A waiter that gives up must Leave and then
	// release token: a grant may have reached it first.
	AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (Grant, error)
}

// GrantWake is the wake-up that tells waiter (a WaiterID) that a release
// granted it the key with fence, from the place its attempt wrote
// (Handover).
func GrantWake(waiter string, fence, attempt uint64) string {
	return waiter + "/" + strconv.FormatUint(fence, 10) + "/" + strconv.FormatUint(attempt, 10)
}

// ParseWake reads a wake-up: the waiter it names ("" for any waiter)
// and, from a GrantWake, the grant's fence and attempt (0 and 0 from any
// other wake-up).
func ParseWake(wake string) (waiter string, fence, attempt uint64) {
	w, rest, ok := strings.Cut(wake, "/")
	if !ok {
		return wake, 0, 0
	}
	f, a, ok := strings.Cut(rest, "/")
	if !ok {
		return w, 0, 0
	}
	fence, ferr := strconv.ParseUint(f, 10, 64)
	attempt, aerr := strconv.ParseUint(a, 10, 64)
	if ferr != nil || aerr != nil || fence == 0 || attempt == 0 {
		return w, 0, 0
	}
	return w, fence, attempt
}

// WaiterID names the waiter holding token in wake-ups: the first 16 hex
// digits of the token's SHA-1 (what Redis's Lua computes with
// redis.sha1hex). It does not reveal the token.
func WaiterID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// ValidateStay checks a waiter's stay in a queue. Errors wrap ErrInvalid.
func ValidateStay(stay time.Duration) error {
	if stay < MinTTL || stay > MaxTTL {
		return fmt.Errorf("%w: queue stay %v out of range [%v, %v]", ErrInvalid, stay, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateQueued checks the arguments of Queuer.AcquireQueued: Validate,
// ValidateHolder and ValidateStay. Errors wrap ErrInvalid.
func ValidateQueued(key, token string, ttl time.Duration, holder string, stay time.Duration) error {
	if err := Validate(key, token, ttl); err != nil {
		return err
	}
	if err := ValidateHolder(holder); err != nil {
		return err
	}
	return ValidateStay(stay)
}

// ValidateLeave checks the arguments of Queuer.Leave: ValidateKey and
// ValidateToken. Errors wrap ErrInvalid.
func ValidateLeave(key, token string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return ValidateToken(token)
}
