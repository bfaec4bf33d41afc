package driver

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
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
	// wakes one waiter, not all. The channel has a buffer and is never
	// closed; a wake-up may be spurious, and one lost (the buffer full,
	// the connection down) is made good by the caller's polling. A store
	// that cannot watch now returns an error, and the caller polls.
	Watch(ctx context.Context, key string) (wake <-chan string, stop func(), err error)
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
