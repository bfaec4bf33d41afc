// Package ratelimittest is the conformance suite every ratelimit.Store must
// pass, with memstore as the model.
//
// Each store's tests call [Run] with a function that returns a [Target]:
// the store under test, the store's clock when the test can drive it (the
// in-process stores), a listing of every piece of state the store holds
// with its time to live, and the means to cut the store off. The suite
// checks what each call returns against the model (memstore, replayed at
// the store's own decision times), and what the store really holds.
package ratelimittest

import (
	"context"
	"time"

	"github.com/tenurekit/tenure/internal/storekit"
	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Faults breaks and heals the path between a Store and its server.
type Faults interface {
	// Cut makes the server unreachable: requests fail, in-flight replies are
	// lost.
	Cut()
	// DropReplies lets requests reach the server and apply, but loses every
	// reply.
	DropReplies()
	// Heal restores normal service.
	Heal()
}

// KeyTTL is one piece of state a store holds: its name (as the store
// spells it) and its time to live on the store's clock. A TTL <= 0 means it
// never expires, which the suite reports as a failure.
type KeyTTL struct {
	Key string
	TTL time.Duration
}

// Target is one store under test.
type Target struct {
	// Store is the store under test; Faults act on it. Required.
	Store ratelimit.Store
	// Clock is the store's clock when the test drives it (memstore,
	// sqlitestore); nil for stores on a real clock (Redis, PostgreSQL),
	// where the suite waits and polls the store's own judgement instead.
	Clock *Clock
	// Keys lists every key or row the store holds for this target (the
	// suite gives each target a store of its own, or a prefix of its own),
	// with its TTL. Required.
	Keys func(ctx context.Context) ([]KeyTTL, error)
	// Faults breaks the path between Store and its server. Required.
	Faults Faults
	// Poison, when set, stores a malformed value (with an expiry) under the
	// state of key, so that a decision reading it must fail before it
	// writes anything.
	Poison func(ctx context.Context, key driver.StateKey) error
	// NoBubble, when not empty, says why the store cannot be called from
	// a testing/synctest bubble; the skewed-caller case does not apply and
	// Run leaves it out (and logs why).
	NoBubble string
	// Retained, if set, reaches what the store keeps of state, expired or
	// not, for the case that checks expired state leaves nothing once the
	// store has reclaimed it (ExpiredStateLeavesNoKeys; skipped when nil).
	Retained *Retained
}

// Clock is a store clock that the suite moves by hand (storetest.Clock).
// Start it far from the real time, so a store that reads the wrong clock is
// caught.
type Clock = storekit.Clock

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return storekit.NewClock(start) }

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break: it is
// storetest.NewFaults().Limits(s), returned with its faults.
func Wrap(s ratelimit.Store) (ratelimit.Store, Faults) {
	f := storekit.NewFaults()
	return f.Limits(s), f
}
