package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

var (
	//go:embed lua/ratelimit_decide.lua
	rateDecideSrc string
	//go:embed lua/ratelimit_gcra.lua
	rateGCRASrc string
	//go:embed lua/ratelimit_fixed.lua
	rateFixedSrc string
	//go:embed lua/ratelimit_permit.lua
	ratePermitSrc string

	rateDecideScript = rclient.NewScript(rateDecideSrc)
	rateGCRAScript   = rclient.NewScript(rateGCRASrc)
	rateFixedScript  = rclient.NewScript(rateFixedSrc)
	ratePermitScript = rclient.NewScript(ratePermitSrc)
)

// Limits returns the store's ratelimit.Store view. Every decision is one
// script call (EVALSHA, EVAL after NOSCRIPT), so one round trip, judged on
// the server's clock (TIME inside the script): a single GCRA or fixed
// window limiter runs a lean script of its own, everything else (groups,
// sliding logs and windows) the general one. The keys of one decision
// share a hash tag: a single limiter's is the caller's key, a group's is
// the group name, so a group's limits can be checked together on Redis
// Cluster (and a group's state lives in one slot). Every key is
// written with an expiry (PXAT), the millisecond after its state stops
// mattering; the scripts read and check every key before writing any.
//
// Keys are <prefix>rl{<key>}:<kind>:<limit> for a single limiter and
// <prefix>rl{*<group>}:<kind>:<limit>:<key> for a group member: GCRA,
// fixed window and sliding window counter state is one string, a sliding
// log is a sorted set with one member per admitted unit, and a concurrency
// limit is a sorted set of permits (kind p) and a hash of their fences
// (the same key and ":f").
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		l := &rateLimits{s: s}
		l.PermitOps = driver.PermitOps{Op: l.permit}
		return l
	}).(*rateLimits)
}

type rateLimits struct {
	s *Store
	// PermitOps gives AcquirePermit, RenewPermit and ReleasePermit
	// from permit.
	driver.PermitOps
	last atomic.Pointer[limitArgs] // the arguments of the last limit sent
}

// limitArgs caches the decimal forms of a limit's parameters: a process
// usually sends one or a few limits over and over.
type limitArgs struct {
	lim                 ratelimit.Limit
	rate, period, burst string
}

// args returns the decimal forms of l's parameters.
func (l *rateLimits) args(lim ratelimit.Limit) *limitArgs {
	if a := l.last.Load(); a != nil && a.lim == lim {
		return a
	}
	a := &limitArgs{lim: lim,
		rate:   itoa(int64(lim.Rate)),
		period: itoa(int64(lim.Period / time.Microsecond)),
		burst:  itoa(int64(lim.Burst))}
	l.last.Store(a)
	return a
}

// rateKey returns the Redis key of a state key: the tag (the caller's key,
// or "*" and the group's name) in braces, then the kind and the limit name,
// and for a group member the caller's key.
func (s *Store) rateKey(k driver.StateKey) string {
	if k.Group == "" {
		return s.prefix + "rl{" + escape(k.Key) + "}:" + k.Kind + ":" + k.Name
	}
	return s.prefix + "rl{*" + escape(k.Group) + "}:" + k.Kind + ":" + k.Name + ":" + k.Key
}

// permitKeys returns the permit set and the fence hash of a state key.
func (s *Store) permitKeys(k driver.StateKey) (set, fences string) {
	set = s.rateKey(k)
	return set, set + ":f"
}

// rateErr classifies an error for the ratelimit package: transport
// failures wrap ratelimit.ErrUnavailable (and lease.ErrUnavailable),
// arguments the server refused wrap ratelimit.ErrInvalid.
func (s *Store) rateErr(err error) error {
	err = s.fail(err)
	switch {
	case errors.Is(err, lease.ErrUnavailable):
		return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	case errors.Is(err, lease.ErrInvalid):
		return fmt.Errorf("%w: %w", ratelimit.ErrInvalid, err)
	}
	return err
}

// ready runs the server check (see Store.Check) before the first write.
func (l *rateLimits) ready(ctx context.Context) error {
	if err := l.s.ready(ctx); err != nil {
		if errors.Is(err, lease.ErrUnavailable) {
			return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// small caches the decimal forms of small numbers (costs, rates).
var small [1025]string

func init() {
	for i := range small {
		small[i] = strconv.Itoa(i)
	}
}

func itoa(n int64) string {
	if n >= 0 && n < int64(len(small)) {
		return small[n]
	}
	return strconv.FormatInt(n, 10)
}

func (l *rateLimits) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := driver.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	if err := l.ready(ctx); err != nil {
		return nil, err
	}
	s := l.s
	keys := make([]string, len(reqs))
	args := make([]string, 1, 1+5*len(reqs))
	args[0] = "0"
	if commit {
		args[0] = "1"
	}
	for i, r := range reqs {
		keys[i] = s.rateKey(r.Key)
		args = append(args,
			itoa(int64(r.Algorithm)),
			itoa(int64(r.Limit.Rate)),
			itoa(int64(r.Limit.Period/time.Microsecond)),
			itoa(int64(r.Limit.Burst)),
			itoa(int64(r.N)))
	}
	res, p := s.decide(ctx, rateDecideScript, keys, args, commit)
	arr, err := res.ToArray()
	if err != nil {
		return nil, s.rateErr(err)
	}
	if err := s.confirm(ctx, p); err != nil {
		return nil, s.rateErr(err)
	}
	if len(arr) != 1+4*len(reqs) {
		return nil, malformed("ratelimit decide")
	}
	vals := make([]int64, len(arr))
	for i := range arr {
		if vals[i], err = arr[i].AsInt64(); err != nil {
			return nil, malformed("ratelimit decide")
		}
	}
	at := time.UnixMicro(vals[0])
	ds := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		v := vals[1+4*i:]
		ds[i] = ratelimit.Decision{
			Allowed:    v[0] == 1,
			Remaining:  int(v[1]),
			RetryAfter: time.Duration(v[2]) * time.Microsecond,
			ResetAfter: time.Duration(v[3]) * time.Microsecond,
			Limit:      r.Limit,
			Algorithm:  r.Algorithm,
			At:         at,
		}
	}
	return ds, nil
}

// decide runs a decision script: a write confirmed by the replicas only
// with Replication.RateLimits, and a plain read when it does not commit.
func (s *Store) decide(ctx context.Context, script *rclient.Script, keys, args []string, commit bool) (rclient.Result, *pending) {
	if !commit {
		return script.Exec(ctx, s.c, keys, args), nil
	}
	return s.write(ctx, script, keys, args, true)
}

// DecideOne is Decide for one request: a GCRA or fixed window limiter runs
// a lean script of its own, which decides and writes atomically on the
// server's clock and returns the state it read; the decision's figures
// (remaining, retry-after, reset-after) are then derived from that state
// here with driver.EvaluateOne, the same arithmetic. The other
// algorithms go through the general script.
func (l *rateLimits) DecideOne(ctx context.Context, r driver.Request, commit bool) (ratelimit.Decision, error) {
	var script *rclient.Script
	switch r.Algorithm {
	case ratelimit.GCRA:
		script = rateGCRAScript
	case ratelimit.FixedWindow:
		script = rateFixedScript
	default:
		ds, err := l.Decide(ctx, []driver.Request{r}, commit)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		return ds[0], nil
	}
	if err := driver.ValidateRequest(&r, commit); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := l.ready(ctx); err != nil {
		return ratelimit.Decision{}, err
	}
	s := l.s
	c := "0"
	if commit {
		c = "1"
	}
	key := s.rateKey(r.Key)
	a := l.args(r.Limit)
	res, p := s.decide(ctx, script, []string{key}, []string{c, a.rate, a.period, a.burst, itoa(int64(r.N))}, commit)
	reply, err := res.ToString()
	if err != nil {
		return ratelimit.Decision{}, s.rateErr(err)
	}
	if err := s.confirm(ctx, p); err != nil {
		return ratelimit.Decision{}, s.rateErr(err)
	}
	// "<now, negated when denied> <rest>"
	first, rest, _ := strings.Cut(reply, " ")
	now, err := strconv.ParseInt(first, 10, 64)
	if err != nil || now == 0 {
		return ratelimit.Decision{}, malformed("ratelimit decide")
	}
	allowed := now > 0
	if !allowed {
		now = -now
	}
	var st *driver.State
	switch r.Algorithm {
	case ratelimit.GCRA:
		// rest: the state read ("" if none)
		if rest != "" {
			if st, err = gcraState(rest, int64(r.Limit.Rate)); err != nil {
				return ratelimit.Decision{}, fmt.Errorf("redisstore: malformed rate limit state at %s", key)
			}
		}
	case ratelimit.FixedWindow:
		// rest: "<end> <count before>"
		e, cnt, _ := strings.Cut(rest, " ")
		end, err1 := strconv.ParseInt(e, 10, 64)
		count, err2 := strconv.ParseInt(cnt, 10, 64)
		if err1 != nil || err2 != nil {
			return ratelimit.Decision{}, malformed("ratelimit decide")
		}
		st = &driver.State{A: end, B: count, Expires: end}
	}
	d, _ := driver.EvaluateOne(time.UnixMicro(now), &r, st, commit)
	if d.Allowed != allowed {
		return ratelimit.Decision{}, fmt.Errorf("redisstore: the %v script and the reference arithmetic disagree at %s", r.Algorithm, key)
	}
	return d, nil
}

// gcraState parses a GCRA state as the scripts store it: "a" or "a:b:c".
func gcraState(v string, rate int64) (*driver.State, error) {
	a, b, c := v, "0", ""
	if i := strings.IndexByte(v, ':'); i >= 0 {
		a = v[:i]
		if b, c, _ = strings.Cut(v[i+1:], ":"); c == "" {
			return nil, errors.New("malformed")
		}
	}
	st := &driver.State{C: rate}
	var err error
	if st.A, err = strconv.ParseInt(a, 10, 64); err != nil {
		return nil, err
	}
	if st.B, err = strconv.ParseInt(b, 10, 64); err != nil {
		return nil, err
	}
	if c != "" {
		if st.C, err = strconv.ParseInt(c, 10, 64); err != nil || st.C < 1 || st.B >= st.C {
			return nil, errors.New("malformed")
		}
	}
	st.Expires = st.A
	if st.B > 0 {
		st.Expires++
	}
	return st, nil
}

func (l *rateLimits) Reset(ctx context.Context, keys []driver.StateKey) error {
	if err := driver.ValidateStateKeys(keys); err != nil {
		return err
	}
	s := l.s
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = s.rateKey(k)
	}
	// One DEL: the keys of one Reset share a hash tag.
	if err := s.c.Do(ctx, rclient.Cmd{Name: "DEL", Keys: ks}).Error(); err != nil {
		return s.rateErr(err)
	}
	return nil
}

// permit runs the permit script.
func (l *rateLimits) permit(ctx context.Context, op string, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, bool, error) {
	if err := l.ready(ctx); err != nil {
		return driver.PermitGrant{}, false, err
	}
	s := l.s
	set, fences := s.permitKeys(key)
	res, p := s.write(ctx, ratePermitScript, []string{set, fences},
		[]string{op, id, itoa(int64(permits)), itoa(int64(ttl / time.Microsecond))}, false)
	arr, err := res.ToArray()
	if err != nil {
		return driver.PermitGrant{}, false, s.rateErr(err)
	}
	if len(arr) != 5 {
		return driver.PermitGrant{}, false, malformed("ratelimit permit")
	}
	var v [5]int64
	for i := range arr {
		if v[i], err = arr[i].AsInt64(); err != nil {
			return driver.PermitGrant{}, false, malformed("ratelimit permit")
		}
	}
	g := driver.PermitGrant{
		Acquired:   v[0] == 1,
		Fence:      uint64(v[1]),
		InUse:      int(v[2]),
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		At:         time.UnixMicro(v[4]),
	}
	if g.Acquired && op != "x" {
		g.TTL = ttl
	}
	if g.Acquired {
		if err := s.confirm(ctx, p); err != nil {
			if op == "a" {
				// The caller does not get the permit: give it back.
				cctx, cancel := s.afterUnconfirmed(ctx)
				_ = ratePermitScript.Exec(cctx, s.c, []string{set, fences}, []string{"x", id, "1", "0"}).Error()
				cancel()
			}
			return driver.PermitGrant{}, false, s.rateErr(err)
		}
	}
	return g, v[0] == 1, nil
}

// LimitTTL reports whether the server holds rate limit state under k (see
// ratelimit.Limiter.StateKey) and its key's time to live (PTTL).
func (s *Store) LimitTTL(ctx context.Context, k driver.StateKey) (time.Duration, bool, error) {
	if err := driver.ValidateStateKeys([]driver.StateKey{k}); err != nil {
		return 0, false, err
	}
	ms, err := s.c.Do(ctx, rclient.Cmd{Name: "PTTL", Keys: []string{s.rateKey(k)}, ReadOnly: true}).AsInt64()
	switch {
	case err != nil:
		return 0, false, s.rateErr(err)
	case ms == -2:
		return 0, false, nil
	case ms == -1:
		return 0, true, nil // no expiry: never written by this store
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}
