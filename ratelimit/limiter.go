package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// Limiter enforces one Limit with one Algorithm on a Store, per key. It is
// safe for concurrent use; any number of Limiters, in any number of
// processes, enforce the same limit together when they share the store,
// the algorithm and the limit's Name.
type Limiter struct {
	s    Store             // as given
	st   Store             // s, timed when instrumentation is on
	one  driver.OneDecider // s, when it has a single-request path (timed by decide)
	alg  Algorithm
	lim  Limit
	spec *driver.Spec // the validated limit the requests are built from
	tel  *telemetry   // nil when instrumentation is off
}

// New returns a Limiter for limit l with algorithm a on store s, with
// options o (nil: the defaults, the global OpenTelemetry providers). The
// limit is validated here, before anything can be written: errors wrap
// ErrInvalid and say what is wrong (a nil store, also a nil pointer of a
// store type, is one).
func New(s Store, a Algorithm, l Limit, o *Options) (*Limiter, error) {
	if isNil(s) {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	spec, err := driver.NewSpec(a, l)
	if err != nil {
		return nil, err
	}
	nl := spec.Limit()
	tel := newTelemetry(s, nl.Name, o)
	st, one := timed(s, tel)
	return &Limiter{s: s, st: st, one: one, alg: a, lim: nl, spec: spec, tel: tel}, nil
}

// Limit returns the limit enforced, with its defaults (Name, Burst) filled
// in.
func (l *Limiter) Limit() Limit { return l.lim }

// Algorithm returns the algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

func (l *Limiter) request(group, key string, n int, commit bool) (driver.Request, error) {
	return l.spec.Request(group, key, n, commit)
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n units may pass for key now, on the store's
// clock, and consumes them if so, in one atomic step (one round trip on
// Redis and PostgreSQL). n is 1 to Limit().Capacity(). A denied request
// consumes nothing. On ErrUnavailable the outcome is unknown: the units may
// have been consumed.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if l.tel == nil {
		return l.decide(ctx, key, n, true)
	}
	ctx, sp := l.tel.start(ctx, "tenure.ratelimit.allow", key)
	d, err := l.decide(ctx, key, n, true)
	l.tel.decided(ctx, sp, d.Allowed, err)
	return d, err
}

// Peek reports what AllowN(ctx, key, n) would decide now without consuming
// anything or writing to the store; n may be 0 to read the remaining units.
func (l *Limiter) Peek(ctx context.Context, key string, n int) (Decision, error) {
	return l.decide(ctx, key, n, false)
}

func (l *Limiter) decide(ctx context.Context, key string, n int, commit bool) (Decision, error) {
	r, err := l.request("", key, n, commit)
	if err != nil {
		return Decision{}, err
	}
	if l.one != nil {
		if l.tel == nil {
			return l.one.DecideOne(ctx, r, commit)
		}
		cctx, call := l.tel.calls.Start(ctx, opDecide)
		d, err := l.one.DecideOne(cctx, r, commit)
		call.End(ctx, storeOutcomes.Of(err))
		return d, err
	}
	ds, err := l.st.Decide(ctx, []driver.Request{r}, commit)
	if err != nil {
		return Decision{}, err
	}
	if len(ds) != 1 {
		return Decision{}, fmt.Errorf("ratelimit: store returned %d decisions for 1 request", len(ds))
	}
	d := ds[0]
	d.Limit, d.Algorithm = l.lim, l.alg
	return d, nil
}

// StateKey returns the key under which the store keeps key's state for
// this limiter (for the stores' inspection methods, such as LimitTTL).
func (l *Limiter) StateKey(key string) (driver.StateKey, error) {
	return l.spec.StateKey("", key)
}

// Reset forgets key's state: the limit is fully available again.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	k, err := l.spec.StateKey("", key)
	if err != nil {
		return err
	}
	return l.st.Reset(ctx, []driver.StateKey{k})
}

// Group checks several limits together, all or nothing, in one atomic
// step: a request passes only if every limit allows it, and then consumes
// units from each; when one denies, none is charged. A typical group is a
// per-user limit and a global one.
//
// A Group keeps its limits' state under its own name: on Redis Cluster all
// of it lives in one hash slot (the group's), which is what lets one script
// check every limit. The count a Limiter keeps for a key on its own is
// therefore separate from the count the same Limiter keeps as a member of
// a Group.
type Group struct {
	name     string
	s        Store // the members' store, timed when instrumentation is on
	members  []*Limiter
	capacity int
	tel      *telemetry // the first member's, under the group's name
}

// NewGroup returns a Group named name (the same rules as a limit's Name)
// over limiters, which must share one store and differ in Name or
// Algorithm. At most MaxGroup limiters.
func NewGroup(name string, limiters ...*Limiter) (*Group, error) {
	if err := driver.ValidateName("group name", name); err != nil {
		return nil, err
	}
	if len(limiters) == 0 || len(limiters) > MaxGroup {
		return nil, fmt.Errorf("%w: a group has 1 to %d limiters, not %d", ErrInvalid, MaxGroup, len(limiters))
	}
	for _, l := range limiters {
		if l == nil || l.s == nil {
			return nil, fmt.Errorf("%w: nil limiter in group %q", ErrInvalid, name)
		}
	}
	g := &Group{name: name, s: limiters[0].st, capacity: limiters[0].lim.Capacity(), tel: limiters[0].tel.withName(name)}
	for i, l := range limiters {
		if !sameStore(l.s, limiters[0].s) {
			return nil, fmt.Errorf("%w: the limiters of group %q use different stores", ErrInvalid, name)
		}
		for _, o := range limiters[:i] {
			if o.lim.Name == l.lim.Name && o.alg == l.alg {
				return nil, fmt.Errorf("%w: limit %q (%v) twice in group %q", ErrInvalid, l.lim.Name, l.alg, name)
			}
		}
		g.capacity = min(g.capacity, l.lim.Capacity())
	}
	g.members = append([]*Limiter(nil), limiters...)
	return g, nil
}

// isNil reports whether s is nil, or an interface holding a nil pointer,
// map, slice, channel or function (a store that would panic when used).
func isNil(s Store) bool {
	if s == nil {
		return true
	}
	switch v := reflect.ValueOf(s); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// sameStore reports whether a and b are the same store value (false when
// the store's type cannot be compared).
func sameStore(a, b Store) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Limiters returns the group's limiters, in order.
func (g *Group) Limiters() []*Limiter { return append([]*Limiter(nil), g.members...) }

func (g *Group) requests(keys []string, n int, commit bool) ([]driver.Request, error) {
	if len(keys) != len(g.members) {
		return nil, fmt.Errorf("%w: %d keys for the %d limits of group %q", ErrInvalid, len(keys), len(g.members), g.name)
	}
	reqs := make([]driver.Request, len(keys))
	for i, l := range g.members {
		r, err := l.request(g.name, keys[i], n, commit)
		if err != nil {
			return nil, err
		}
		reqs[i] = r
	}
	return reqs, nil
}

// AllowN decides n units for keys[i] under limit i of the group, all or
// nothing, in one atomic step. It returns the combined decision (see
// Combine) and each limit's own, in order.
//
// Its decision is counted once in tenure.ratelimit.decisions, with the
// group's name as the limit attribute.
func (g *Group) AllowN(ctx context.Context, keys []string, n int) (Decision, []Decision, error) {
	if g.tel == nil {
		return g.decide(ctx, keys, n, true)
	}
	ctx, sp := g.tel.start(ctx, "tenure.ratelimit.allow", "")
	d, ds, err := g.decide(ctx, keys, n, true)
	g.tel.decided(ctx, sp, d.Allowed, err)
	return d, ds, err
}

// Peek reports what AllowN would decide, consuming nothing.
func (g *Group) Peek(ctx context.Context, keys []string, n int) (Decision, []Decision, error) {
	return g.decide(ctx, keys, n, false)
}

func (g *Group) decide(ctx context.Context, keys []string, n int, commit bool) (Decision, []Decision, error) {
	reqs, err := g.requests(keys, n, commit)
	if err != nil {
		return Decision{}, nil, err
	}
	ds, err := g.s.Decide(ctx, reqs, commit)
	if err != nil {
		return Decision{}, nil, err
	}
	if len(ds) != len(reqs) {
		return Decision{}, nil, fmt.Errorf("ratelimit: store returned %d decisions for %d requests", len(ds), len(reqs))
	}
	for i, l := range g.members {
		ds[i].Limit, ds[i].Algorithm = l.lim, l.alg
	}
	return Combine(ds), ds, nil
}

// Reset forgets the group's state for keys[i] under limit i.
func (g *Group) Reset(ctx context.Context, keys []string) error {
	reqs, err := g.requests(keys, 1, true)
	if err != nil {
		return err
	}
	ks := make([]driver.StateKey, len(reqs))
	for i, r := range reqs {
		ks[i] = r.Key
	}
	return g.s.Reset(ctx, ks)
}

// Combine merges the decisions of limits checked together: allowed only if
// all are; the least Remaining; the longest RetryAfter among the denied
// ones (when every one of them allows again, if nothing else consumes
// units) and the longest ResetAfter. Limit and Algorithm are those of the
// first denying limit, or else of the one with the least Remaining.
func Combine(ds []Decision) Decision {
	if len(ds) == 0 {
		return Decision{}
	}
	c := Decision{Allowed: true, Remaining: ds[0].Remaining}
	pick := 0
	for i, d := range ds {
		c.Allowed = c.Allowed && d.Allowed
		c.RetryAfter = max(c.RetryAfter, d.RetryAfter)
		c.ResetAfter = max(c.ResetAfter, d.ResetAfter)
		c.Remaining = min(c.Remaining, d.Remaining)
		switch {
		case !d.Allowed && ds[pick].Allowed:
			pick = i
		case d.Allowed == ds[pick].Allowed && d.Allowed && d.Remaining < ds[pick].Remaining:
			pick = i
		}
	}
	c.Limit, c.Algorithm, c.At = ds[pick].Limit, ds[pick].Algorithm, ds[pick].At
	if c.Allowed {
		c.RetryAfter = 0
	}
	return c
}

// LimitedError is returned when a concurrency limit has no free permit.
type LimitedError struct {
	// Key is the key asked for.
	Key string
	// Permits is the limit and InUse the permits held when it refused.
	Permits, InUse int
	// RetryAfter is how long until the soonest held permit expires; one
	// may be released earlier.
	RetryAfter time.Duration
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("ratelimit: no permit for %q: %d of %d in use (the soonest expires in %v)", e.Key, e.InUse, e.Permits, e.RetryAfter)
}

// Is reports whether target is ErrLimited.
func (e *LimitedError) Is(target error) bool { return target == ErrLimited }

// isUnavailable reports whether err means the store could not answer.
func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
