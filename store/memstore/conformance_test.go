package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	idempotencydriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/storetest"
)

// newStore is the one place the conformance tests build a memstore: on
// clock when it is set.
func newStore(t *testing.T, clock *storetest.Clock) *memstore.Store {
	var o *memstore.Options
	if clock != nil {
		o = &memstore.Options{Clock: clock.Now}
	}
	return newMem(t, o)
}

// TestConformance runs every suite on memstore, with client-side faults
// (there is no network to break).
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		Lease: func(t *testing.T) leasetest.Target {
			ms := newStore(t, nil)
			faults := storetest.NewFaults()
			return leasetest.Target{
				Store:   faults.Leases(ms.Leases()),
				Direct:  ms.Leases(),
				Faults:  faults,
				Restart: func(t *testing.T) lease.Store { return newStore(t, nil).Leases() },
				// A memstore loses everything with its process.
				Forget:   func(t *testing.T) lease.Store { return newStore(t, nil).Leases() },
				Resource: &resource{s: ms, plain: map[string]string{}},
				Ended: &leasetest.Ended{
					Reclaim: func(t *testing.T) { sweepAll(t, ms) },
					Keys:    func(t *testing.T, prefix string) []string { return ms.LeaseKeys(prefix) },
					Raise:   func(t *testing.T, key string, f uint64) { ms.SetFence(key, f) },
				},
			}
		},
		Idempotency: func(t *testing.T) idempotencytest.Target {
			ms := newStore(t, nil)
			faults := storetest.NewFaults()
			return idempotencytest.Target{Store: faults.Idempotency(ms.Idempotency()), Direct: ms.Idempotency(), Faults: faults,
				Retained: &idempotencytest.Retained{
					Reclaim: func(t *testing.T) { idemWrites(t, ms) },
					Records: func(t *testing.T, scope string) []string { return ms.IdempotencyRecords(scope) },
				},
			}
		},
		RateLimit: func(t *testing.T, clock *storetest.Clock) ratelimittest.Target {
			ms := newStore(t, clock)
			faults := storetest.NewFaults()
			return ratelimittest.Target{
				Store:  faults.Limits(ms.Limits()),
				Faults: faults,
				Keys: func(context.Context) ([]ratelimittest.KeyTTL, error) {
					var ks []ratelimittest.KeyTTL
					for k, ttl := range ms.RateLimitKeys() {
						ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: ttl})
					}
					return ks, nil
				},
				Retained: &ratelimittest.Retained{
					Reclaim: func(t *testing.T) { limitWrites(t, ms) },
					Stored:  func(t *testing.T) []string { return limitEntries(t, ms) },
				},
			}
		},
		Session: func(t *testing.T, clock *storetest.Clock) sessiontest.Target {
			ms := newStore(t, clock)
			faults := storetest.NewFaults()
			return sessiontest.Target{Store: faults.Sessions(ms.Sessions()), Direct: ms.Sessions(), Faults: faults,
				Commit:   &memCommitter{s: ms, cut: faults.IsCut},
				Present:  func(t *testing.T, id session.ID) bool { return ms.SessionPresent(id) },
				Retained: &sessiontest.Retained{Reclaim: func(t *testing.T) { sessionWrites(t, ms) }},
			}
		},
		Schedule: func(t *testing.T, clock *storetest.Clock) scheduletest.Target {
			ms := newStore(t, clock)
			return scheduletest.Target{
				Store: ms.Schedules(),
				// The business counter is a slot value added to in the
				// fenced completion.
				Complete: func(ctx context.Context, slot *schedule.Slot) error {
					return ms.CompleteSlot(ctx, slot, memstore.AddSlotValue("count", 1))
				},
				Count: func(ctx context.Context, job string) (int64, error) {
					b, err := ms.SlotValue(ctx, job, "count")
					if err != nil || len(b) == 0 {
						return 0, err
					}
					return strconv.ParseInt(string(b), 10, 64)
				},
				Retained: &scheduletest.Retained{
					Reclaim: func(t *testing.T, ret time.Duration) {
						if _, err := retention.SweepAll(t.Context(), ms, retention.Options{ScheduleRetention: ret}, 0); err != nil {
							t.Fatalf("Sweep: %v", err)
						}
					},
					Stored: func(t *testing.T, job string) scheduletest.Stored {
						slots, ledger, attempts := ms.ScheduleStored(job)
						return scheduletest.Stored{Slots: slots, Ledger: ledger, Attempts: attempts}
					},
				},
			}
		},
		Clocks: storetest.Clocks{
			RateLimit: storetest.DrivenClock,
			Session:   storetest.DrivenClock,
			Schedule:  storetest.BothClocks,
		},
	})
}

// resource adapts the memstore fenced register for the lease suite; its
// plain writes go to an unguarded map, the negative control.
type resource struct {
	s     *memstore.Store
	mu    sync.Mutex
	plain map[string]string
}

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *resource) FencedWriteAtLeast(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSetAtLeast(ctx, name, f, []byte(v))
}

func (r *resource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.s.HolderSet(ctx, l, name, []byte(v))
}

func (r *resource) PlainWrite(_ context.Context, name, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain[name] = v
	return nil
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	v, ok := r.plain[name]
	r.mu.Unlock()
	if ok {
		return v, nil
	}
	b, _, err := r.s.FencedGet(ctx, name)
	return string(b), err
}

// memCommitter keeps business values in a map changed inside WithSession.
type memCommitter struct {
	s   *memstore.Store
	cut func() bool
	mu  sync.Mutex
	v   map[[2]string]string
}

func (c *memCommitter) Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error {
	if c.cut() {
		return fmt.Errorf("%w: cut off", session.ErrUnavailable)
	}
	return c.s.WithSession(ctx, id, version, func() error {
		c.mu.Lock()
		if c.v == nil {
			c.v = map[[2]string]string{}
		}
		c.v[[2]string{userID, name}] = value
		c.mu.Unlock()
		if hold != nil {
			hold()
		}
		return nil
	})
}

func (c *memCommitter) Read(_ context.Context, userID, name string) (string, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.v[[2]string{userID, name}]
	return v, ok, nil
}

// idemWrites writes the idempotency view as often as it takes for the
// store's own cleanup (a sweep of the records past their retention every
// 1024 claims) to run once: claims of one key, outside the suite's scopes.
func idemWrites(t *testing.T, s *memstore.Store) {
	t.Helper()
	v, tok := s.Idempotency(), idempotency.NewToken()
	b := idempotencydriver.Begin{ID: idempotency.ID{Scope: "memstore/reclaim", Key: "writes"}, Token: tok, ClaimTTL: time.Second, Retention: time.Second}
	for range 1024 {
		if _, err := v.Begin(t.Context(), b); err != nil {
			t.Fatalf("Begin: %v", err)
		}
	}
}

// sessionWrites writes the session view as often as it takes for the
// store's own cleanup (each writing call checks the next two records of a
// round-robin sweep) to go round a few hundred records: loads of a session
// that does not exist.
func sessionWrites(t *testing.T, s *memstore.Store) {
	t.Helper()
	v, id := s.Sessions(), session.ID("0000"+strings.Repeat("0", 64))
	for range 1024 {
		if _, err := v.Load(t.Context(), id, 0); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("Load of a session that does not exist: %v", err)
		}
	}
}

// limitWrites writes the rate limit view as often as it takes for the
// store's own cleanup (each write looks at the entries that expire soonest
// in its part of the map and in another, taken in turn) to go round every
// part a few times: decisions on one key of a limit of its own, whose state
// it then resets.
func limitWrites(t *testing.T, s *memstore.Store) {
	t.Helper()
	l, err := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "memstore-reclaim", Rate: 1 << 20, Period: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 1024 {
		if _, err := l.Allow(t.Context(), "writes"); err != nil {
			t.Fatalf("Allow: %v", err)
		}
	}
	if err := l.Reset(t.Context(), "writes"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
}

// limitEntries lists the rate limit entries the store holds: the live ones
// by key, the expired ones (which it does not name) as "expired entry".
func limitEntries(t *testing.T, s *memstore.Store) []string {
	t.Helper()
	var out []string
	for k := range s.RateLimitKeys() {
		out = append(out, k)
	}
	n, err := s.RateLimitEntries()
	if err != nil {
		t.Fatalf("RateLimitEntries: %v", err)
	}
	for range n - len(out) {
		out = append(out, "expired entry")
	}
	return out
}

// sweepAll sweeps s until nothing is left to sweep.
func sweepAll(t *testing.T, s *memstore.Store) {
	t.Helper()
	if r, err := retention.SweepAll(t.Context(), s, retention.Options{}, 0); err != nil || r.More {
		t.Fatalf("Sweep: %+v, %v", r, err)
	}
}
