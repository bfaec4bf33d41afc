package memstore

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/internal/limitmem"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Limits returns the store's ratelimit.Store view: the reference
// implementation of the rate limit algorithms ([driver.Evaluate]) on a
// map, judged on the store's clock. Expired state counts as absent; it is
// reused by its key's next decision, or deleted once it expired more than
// a second ago: every write also looks at up to four of the entries that
// expire soonest in the key's part of the map and four in another part
// (taken in turn), so expired state is released at least as fast as new
// keys create it.
//
// The map is split into parts (up to 64, each with its own lock, chosen
// by a hash of the caller's key), so that decisions on different keys
// rarely wait for each other; a decision that checks several limits
// together locks every part its keys fall in, so it is still one atomic
// step.
//
// The view holds at most Options.LimitKeys entries (one per key and limit;
// default DefaultLimitKeys). When it is full, a decision that would create
// an entry first deletes entries that have expired, the soonest first; if
// none has, the decision is refused as if the limit were used up: Allowed
// false, Remaining 0, and RetryAfter until the soonest entry expires (a
// permit is not granted, with the same RetryAfter). Keys that already hold
// state are never refused for want of room, so a full store never admits
// more than a limit allows.
func (s *Store) Limits() ratelimit.Store { return s.limits() }

// limits returns the engine that holds the store's rate limit state.
func (s *Store) limits() *limitmem.Engine {
	return s.view("ratelimit", func() any {
		return limitmem.New(limitmem.Options{Name: "memstore", Now: s.clock, MaxKeys: s.limitKeys, Grace: time.Second})
	}).(*limitmem.Engine)
}

// DefaultLimitKeys is the default of Options.LimitKeys.
const DefaultLimitKeys = 1 << 20

// LimitTTL reports whether the store holds rate limit state under k (see
// ratelimit.Limiter.StateKey) and how long until it expires on the store's
// clock.
func (s *Store) LimitTTL(ctx context.Context, k driver.StateKey) (time.Duration, bool, error) {
	return s.limits().TTL(ctx, k)
}
