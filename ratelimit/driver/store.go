package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenurekit/tenure/internal/jsonx"
	"time"
)

// Store is the contract every backend implements (memstore, sqlitestore,
// pgstore, redisstore; their Limits method returns it). Package ratelimit
// re-exports it as ratelimit.Store. Stores judge time
// on their own clock (Redis TIME, PostgreSQL clock_timestamp(), the
// process that owns a SQLite file or memory store), never the caller's.
//
// Implementations must make each call one atomic step, give every piece of
// state they write an expiry (a key TTL, or an expiry column that reads
// judge and a sweep removes), wrap transport failures in ErrUnavailable,
// and be safe for concurrent use. The requests they get were validated by
// package ratelimit; stores re-check what their own arithmetic relies on before
// writing. [Evaluate] is the reference implementation of the algorithms,
// which in-process stores run directly.
type Store interface {
	// Decide judges every request on the store's clock, in one atomic step.
	// With commit, when every request is allowed, each one's units are
	// consumed; when any is denied, nothing is written. Without commit (a
	// peek) nothing is written. Decisions come back in the order of reqs;
	// stores fill Allowed, Remaining, RetryAfter, ResetAfter and At.
	Decide(ctx context.Context, reqs []Request, commit bool) ([]Decision, error)
	// Reset deletes the state of keys.
	Reset(ctx context.Context, keys []StateKey) error
	// AcquirePermit grants a permit id on key if fewer than permits
	// unexpired permits are held there; the permit expires ttl after the
	// store applied the call unless renewed. An id that already holds a
	// permit there is renewed (so an acquire whose reply was lost can be
	// retried). The grant's fence is strictly greater than every fence
	// granted on key before.
	AcquirePermit(ctx context.Context, key StateKey, id string, permits int, ttl time.Duration) (PermitGrant, error)
	// RenewPermit extends permit id on key to ttl from now (store clock);
	// ErrPermitLost if it is not held (expired or released).
	RenewPermit(ctx context.Context, key StateKey, id string, ttl time.Duration) (PermitGrant, error)
	// ReleasePermit frees permit id on key; ErrPermitLost if it was not
	// held any more.
	ReleasePermit(ctx context.Context, key StateKey, id string) error
}

// StateKey names one piece of limiter state: the state of Key under the
// limit Name, kept by the algorithm Kind, on its own or as a member of
// Group. Stores key their state by all four fields (String is a canonical
// form of them).
type StateKey struct {
	// Group is the name of the Group the state belongs to; "" for a
	// limiter used on its own.
	Group string
	// Name is the limit's name (never contains ':').
	Name string
	// Kind is the algorithm's short code: "g" GCRA, "f" fixed window, "l"
	// sliding log, "w" sliding window, "p" concurrency permits.
	Kind string
	// Key is the caller's key.
	Key string
}

// Tag is what the keys of one call have in common, so that a store can
// keep them together (on Redis Cluster it is the hash tag, so they share a
// slot): a group's keys share "*" and the group's name, a single limiter's
// key is its own tag.
func (k StateKey) Tag() string {
	if k.Group != "" {
		return "*" + k.Group
	}
	return k.Key
}

// String returns the key's canonical form, "s:<kind>:<name>:<key>" or
// "g:<group>:<kind>:<name>:<key>"; distinct keys have distinct forms
// (names and kinds contain no ':').
func (k StateKey) String() string {
	if k.Group == "" {
		return "s:" + k.Kind + ":" + k.Name + ":" + k.Key
	}
	return "g:" + k.Group + ":" + k.Kind + ":" + k.Name + ":" + k.Key
}

// valid reports whether the key's fields are set.
func (k StateKey) valid() bool { return k.Name != "" && k.Kind != "" && k.Key != "" }

// Request is one limit to judge in a call to Store.Decide.
type Request struct {
	// Key is the state of this limit and key.
	Key StateKey
	// Algorithm and Limit (with defaults applied: Name and Burst set)
	// define the decision.
	Algorithm Algorithm
	Limit     Limit
	// N is the cost: 1 to Limit.Capacity() units for a decision, 0 to
	// Capacity() for a peek.
	N int

	// gcra caches the GCRA arithmetic's constants, computed once by the
	// Spec (the engine checks they match Limit).
	gcra *gcraParams
	// checked is set by the Spec that built the request from a limit it
	// validated (and key and cost it checked): ValidateRequest need not
	// look again.
	checked, checkedCommit bool
}

// validate re-checks a request as a store must before its first write: the
// bounds the stores' arithmetic relies on (the full rules, names included,
// were checked when the limiter was made).
func (r *Request) validate(commit bool) error {
	l := &r.Limit
	maxRate := MaxRate
	if r.Algorithm == SlidingLog {
		maxRate = MaxLogRate
	}
	switch {
	case !r.Algorithm.valid():
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalid, int(r.Algorithm))
	case l.Rate < 1 || l.Rate > maxRate || l.Burst < 1 || l.Burst > MaxRate ||
		l.Period < MinPeriod || l.Period > MaxPeriod || l.Period%time.Microsecond != 0 ||
		(r.Algorithm != GCRA && l.Burst != l.Rate) || l.Name == "":
		return fmt.Errorf("%w: request limit %v is not a normalized, valid limit", ErrInvalid, *l)
	case !r.Key.valid():
		return fmt.Errorf("%w: empty state key", ErrInvalid)
	}
	if r.Algorithm == GCRA && r.gcra == nil && !refillWithin(*l) {
		return fmt.Errorf("%w: a bucket of %d refilling %d per %v takes longer than %v to refill", ErrInvalid, l.Burst, l.Rate, l.Period, MaxPeriod)
	}
	lo := 1
	if !commit {
		lo = 0
	}
	if r.N < lo || r.N > l.Burst {
		return fmt.Errorf("%w: cost %d out of range [%d, %d] for %v", ErrInvalid, r.N, lo, l.Burst, *l)
	}
	return nil
}

// ValidateRequest checks one request as ValidateRequests does (cheaply for
// a request a Spec built).
func ValidateRequest(r *Request, commit bool) error {
	if r.checked && (r.checkedCommit || !commit) {
		return nil
	}
	return r.validate(commit)
}

// OneDecider is implemented by stores that have a cheaper path for a
// single request than Decide (no slices). Package ratelimit's Limiter uses
// it when the store has it; it must decide exactly as Decide([]Request{*r}, commit) would.
type OneDecider interface {
	DecideOne(ctx context.Context, r Request, commit bool) (Decision, error)
}

// ValidateRequests checks requests as every Store should before its first
// write (package ratelimit's limiters only send valid ones): normalized limits,
// costs within capacity, distinct non-empty keys, at most MaxGroup of
// them. Errors wrap ErrInvalid.
func ValidateRequests(reqs []Request, commit bool) error {
	if len(reqs) == 0 || len(reqs) > MaxGroup {
		return fmt.Errorf("%w: %d requests in one decision, want 1 to %d", ErrInvalid, len(reqs), MaxGroup)
	}
	for i := range reqs {
		r := &reqs[i]
		if err := r.validate(commit); err != nil {
			return err
		}
		for _, o := range reqs[:i] {
			if o.Key == r.Key {
				return fmt.Errorf("%w: state key %q twice in one decision", ErrInvalid, r.Key)
			}
		}
	}
	return nil
}

// ValidateStateKeys checks the keys of a Reset: 1 to MaxGroup non-empty
// keys. Errors wrap ErrInvalid.
func ValidateStateKeys(keys []StateKey) error {
	if len(keys) == 0 || len(keys) > MaxGroup {
		return fmt.Errorf("%w: %d keys, want 1 to %d", ErrInvalid, len(keys), MaxGroup)
	}
	for _, k := range keys {
		if !k.valid() {
			return fmt.Errorf("%w: empty state key", ErrInvalid)
		}
	}
	return nil
}

// ValidateStateKey checks a state key given from outside (an API
// request): a group and a limit name as ValidateName allows them (the
// group may be empty), a known kind ("g", "f", "l", "w" or "p") and a key
// as ValidateKey allows it. Errors wrap ErrInvalid.
func ValidateStateKey(k StateKey) error {
	if k.Group != "" {
		if err := ValidateName("group", k.Group); err != nil {
			return err
		}
	}
	if err := ValidateName("limit name", k.Name); err != nil {
		return err
	}
	switch k.Kind {
	case "g", "f", "l", "w", "p":
	default:
		return fmt.Errorf("%w: state kind %q: want g (GCRA), f (fixed window), l (sliding log), w (sliding window) or p (permits)", ErrInvalid, k.Kind)
	}
	return ValidateKey(k.Key)
}

// Decision is the outcome of a request (ratelimit.Decision).
type Decision struct {
	// Allowed reports whether the request's units were admitted (for a
	// peek: whether they would be).
	Allowed bool
	// Remaining is the number of units the limit would still admit right
	// now, after this decision.
	Remaining int
	// RetryAfter is, for a denied request, how long until the same request
	// would be allowed if nothing else consumed units meanwhile (exact for
	// every algorithm, on the store's clock); 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is fully available again if
	// nothing else consumes units (0 when it is).
	ResetAfter time.Duration
	// Limit is the limit judged (with its defaults filled in).
	Limit Limit
	// Algorithm is the algorithm that judged it.
	Algorithm Algorithm
	// At is the store's clock when it decided (microsecond resolution).
	At time.Time
}

// PermitGrant is a store's answer to AcquirePermit and RenewPermit.
type PermitGrant struct {
	// Acquired reports whether the permit is held now.
	Acquired bool
	// Fence is the permit's fencing token (when Acquired): strictly greater
	// than the fence of every permit granted on the key before it.
	Fence uint64
	// InUse is the number of unexpired permits held on the key after the
	// call.
	InUse int
	// RetryAfter is, when not acquired, how long until the soonest held
	// permit expires (a permit may be released earlier).
	RetryAfter time.Duration
	// TTL is the permit's time left (when Acquired).
	TTL time.Duration
	// At is the store's clock when it decided.
	At time.Time
}

// Bounds on concurrency limits.
const (
	// MaxGroup is the most limits one decision checks together.
	MaxGroup = 16
	// MaxPermits is the largest ConcurrencyLimit.Permits.
	MaxPermits = 10_000
	// MinPermitTTL and MaxPermitTTL bound ConcurrencyLimit.TTL.
	MinPermitTTL = time.Millisecond
	MaxPermitTTL = 24 * time.Hour
	// MaxPermitIDLen is the longest permit id.
	MaxPermitIDLen = 64
)

// ValidatePermit checks the arguments of a permit call as every Store must
// before its first write: key non-empty, id 1 to MaxPermitIDLen bytes of
// visible ASCII, permits 1 to MaxPermits (when > 0 is asked: pass -1 to
// skip), ttl MinPermitTTL to MaxPermitTTL (pass -1 to skip). Errors wrap
// ErrInvalid and never contain the id.
func ValidatePermit(key StateKey, id string, permits int, ttl time.Duration) error {
	if !key.valid() {
		return fmt.Errorf("%w: empty state key", ErrInvalid)
	}
	if id == "" || len(id) > MaxPermitIDLen {
		return fmt.Errorf("%w: permit id must be 1 to %d bytes", ErrInvalid, MaxPermitIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: permit id must be visible ASCII", ErrInvalid)
		}
	}
	if permits != -1 && (permits < 1 || permits > MaxPermits) {
		return fmt.Errorf("%w: permits %d out of range [1, %d]", ErrInvalid, permits, MaxPermits)
	}
	if ttl != -1 && (ttl < MinPermitTTL || ttl > MaxPermitTTL || ttl%time.Microsecond != 0) {
		return fmt.Errorf("%w: permit ttl %v out of range [%v, %v] or not whole microseconds", ErrInvalid, ttl, MinPermitTTL, MaxPermitTTL)
	}
	return nil
}

// MarshalJSON writes the decision with durations as strings and the
// store's time in RFC 3339: {"allowed":false,"remaining":0,
// "retry_after":"1.5s","reset_after":"1m0s","limit":{…},"algorithm":"gcra",
// "at":"2026-…Z"}.
func (d Decision) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Allowed    bool      `json:"allowed"`
		Remaining  int       `json:"remaining"`
		RetryAfter string    `json:"retry_after,omitempty"`
		ResetAfter string    `json:"reset_after,omitempty"`
		Limit      Limit     `json:"limit"`
		Algorithm  Algorithm `json:"algorithm"`
		At         *string   `json:"at,omitempty"`
	}{d.Allowed, d.Remaining, jsonx.Duration(d.RetryAfter), jsonx.Duration(d.ResetAfter), d.Limit, d.Algorithm, jsonx.Time(d.At)})
}

// Spec is a validated limit under one algorithm: package ratelimit's
// Limiter keeps one and builds its requests with it, so that stores need
// not validate the limit again on every request. Stores do not need it.
type Spec struct {
	alg  Algorithm
	lim  Limit
	code string
	gcra *gcraParams
}

// NewSpec validates l for algorithm a and fills in its defaults (see
// Normalize). Errors wrap ErrInvalid.
func NewSpec(a Algorithm, l Limit) (*Spec, error) {
	nl, err := Normalize(a, l)
	if err != nil {
		return nil, err
	}
	s := &Spec{alg: a, lim: nl, code: a.code()}
	if a == GCRA {
		g := newGCRA(nl)
		s.gcra = &g
	}
	return s, nil
}

// Limit returns the limit, with its defaults filled in.
func (s *Spec) Limit() Limit { return s.lim }

// Algorithm returns the algorithm.
func (s *Spec) Algorithm() Algorithm { return s.alg }

// StateKey returns the key of key's state under the limit, for a single
// limiter (group "") or a member of group. Errors wrap ErrInvalid.
func (s *Spec) StateKey(group, key string) (StateKey, error) {
	if err := ValidateKey(key); err != nil {
		return StateKey{}, err
	}
	return StateKey{Group: group, Name: s.lim.Name, Kind: s.code, Key: key}, nil
}

// Request returns the request for n units of key (see StateKey), checked:
// n is 1 to Limit().Capacity() (0 allowed without commit). Errors wrap
// ErrInvalid.
func (s *Spec) Request(group, key string, n int, commit bool) (Request, error) {
	if err := ValidateKey(key); err != nil {
		return Request{}, err
	}
	lo := 1
	if !commit {
		lo = 0
	}
	if c := s.lim.Capacity(); n < lo || n > c {
		return Request{}, fmt.Errorf("%w: cost %d out of range [%d, %d] for %v (a request above capacity could never pass)", ErrInvalid, n, lo, c, s.lim)
	}
	return Request{Key: StateKey{Group: group, Name: s.lim.Name, Kind: s.code, Key: key}, Algorithm: s.alg, Limit: s.lim, N: n,
		gcra: s.gcra, checked: true, checkedCommit: commit}, nil
}
