package ratelimit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// State is the stored state of one StateKey, in the form in-process stores
// (memstore, sqlitestore) keep it and [Evaluate] reads and writes it. The
// fields mean, per algorithm (times in microseconds since the Unix epoch):
//
//   - GCRA: the theoretical arrival time A + B/C (C is the Rate it was
//     computed with, 0 <= B < C).
//   - FixedWindow: A is the end of the window, B the units admitted in it.
//   - SlidingLog: Log, the admitted units, oldest first.
//   - SlidingWindow: A is the index of the current window (time / Period),
//     B the previous window's count, C the current one's.
//   - permits: Permits, and A the last fence granted.
//
// Redis and PostgreSQL keep the same fields in their own form and run the
// same arithmetic (Lua, PL/pgSQL); the conformance suite checks that every
// store decides as [Evaluate] does.
type State struct {
	A, B, C int64
	Log     []LogEntry
	Permits []PermitEntry
	// Expires is when the state stops mattering (microseconds since the
	// epoch): from then on it is as if absent, and a store may delete it.
	Expires int64
}

// LogEntry is N units admitted at At (µs) by a SlidingLog limit.
type LogEntry struct {
	At, N int64
}

// PermitEntry is a held permit.
type PermitEntry struct {
	ID      string
	Fence   int64
	Expires int64 // µs
}

// live reports whether s holds state at now.
func (s *State) live(now int64) bool { return s != nil && s.Expires > now }

// Evaluate is the reference implementation of the algorithms, which
// in-process stores run under their lock. It judges reqs[i] against
// states[i] (nil, or expired at now, means no state) at now, the store's
// clock. It returns the decisions and, when commit is set and every
// request is allowed, the states to store (next[i] replaces states[i]);
// otherwise next is nil and nothing must be written. The requests must be
// valid ([ValidateRequests]).
func Evaluate(now time.Time, reqs []Request, states []*State, commit bool) (ds []Decision, next []*State) {
	us := now.UnixMicro()
	at := time.UnixMicro(us)
	evals := make([]eval, len(reqs))
	all := true
	for i, r := range reqs {
		s := states[i]
		if !s.live(us) {
			s = nil
		}
		evals[i] = evaluate(us, r, s)
		all = all && evals[i].allowed
	}
	consume := commit && all
	ds = make([]Decision, len(reqs))
	if consume {
		next = make([]*State, len(reqs))
	}
	for i, r := range reqs {
		e := &evals[i]
		d := e.decide(us, r, consume)
		d.Limit, d.Algorithm, d.At = r.Limit, r.Algorithm, at
		ds[i] = d
		if consume {
			next[i] = e.next
		}
	}
	return ds, next
}

// eval is the judgement of one request before the call's outcome is known.
type eval struct {
	allowed bool
	// decide computes the decision once it is known whether the call
	// consumes (every request allowed and commit).
	decide func(now int64, r Request, consume bool) Decision
	next   *State
}

func evaluate(now int64, r Request, s *State) eval {
	switch r.Algorithm {
	case GCRA:
		return evalGCRA(now, r, s)
	case FixedWindow:
		return evalFixed(now, r, s)
	case SlidingLog:
		return evalLog(now, r, s)
	case SlidingWindow:
		return evalCounter(now, r, s)
	}
	panic(fmt.Sprintf("ratelimit: unknown algorithm %d", r.Algorithm))
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// pair is a time a + b/den microseconds, 0 <= b < den.
type pair struct{ a, b int64 }

func (p pair) less(q pair) bool { return p.a < q.a || (p.a == q.a && p.b < q.b) }

func (p pair) add(q pair, den int64) pair {
	r := pair{p.a + q.a, p.b + q.b}
	if r.b >= den {
		r.a++
		r.b -= den
	}
	return r
}

func (p pair) sub(q pair, den int64) pair {
	r := pair{p.a - q.a, p.b - q.b}
	if r.b < 0 {
		r.a--
		r.b += den
	}
	return r
}

// ceil rounds p up to whole microseconds.
func (p pair) ceil() int64 {
	if p.b > 0 {
		return p.a + 1
	}
	return p.a
}

// gcraParams are a GCRA limit's emission interval T = period/rate and
// bucket depth tau = burst*T, as pairs with denominator rate.
type gcraParams struct {
	rate, period int64
	t, tau       pair
}

func newGCRA(l Limit) gcraParams {
	g := gcraParams{rate: int64(l.Rate), period: int64(l.Period / time.Microsecond)}
	g.t = pair{g.period / g.rate, g.period % g.rate}
	g.tau = g.mul(int64(l.Burst))
	return g
}

// mul returns x*T exactly (x*T.b < 2^53 within the package's bounds).
func (g gcraParams) mul(x int64) pair {
	p := x * g.t.b
	return pair{x*g.t.a + p/g.rate, p % g.rate}
}

// floorDiv returns floor(x / T) for x >= 0: (x.a*rate + x.b) / period,
// in 128-bit arithmetic.
func (g gcraParams) floorDiv(x pair) int64 {
	if x.a < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x.a), uint64(g.rate))
	lo, carry := bits.Add64(lo, uint64(x.b), 0)
	hi += carry
	if hi >= uint64(g.period) {
		return math.MaxInt64 // cannot happen within bounds
	}
	q, _ := bits.Div64(hi, lo, uint64(g.period))
	return int64(q)
}

func evalGCRA(now int64, r Request, s *State) eval {
	g := newGCRA(r.Limit)
	nowp := pair{now, 0}
	tat := nowp
	if s != nil {
		t := pair{s.A, s.B}
		if s.C != g.rate && s.C > 0 {
			// Stored under another rate: convert the fraction, rounding up.
			t.b = (s.B*g.rate + s.C - 1) / s.C
			if t.b >= g.rate {
				t.a++
				t.b -= g.rate
			}
		}
		if nowp.less(t) {
			tat = t
		}
	}
	newTAT := tat.add(g.mul(int64(r.N)), g.rate)
	allowAt := newTAT.sub(g.tau, g.rate)
	allowed := !nowp.less(allowAt)
	e := eval{allowed: allowed}
	if allowed {
		e.next = &State{A: newTAT.a, B: newTAT.b, C: g.rate, Expires: newTAT.ceil()}
	}
	e.decide = func(now int64, r Request, consume bool) Decision {
		base := tat
		if consume {
			base = newTAT
		}
		d := Decision{Allowed: allowed}
		// Remaining = floor((tau - (base - now)) / T).
		x := g.tau.sub(base.sub(nowp, g.rate), g.rate)
		d.Remaining = int(min(g.floorDiv(x), int64(r.Limit.Burst)))
		if !allowed {
			d.RetryAfter = micros(allowAt.sub(nowp, g.rate).ceil())
		}
		if rst := base.sub(nowp, g.rate).ceil(); rst > 0 {
			d.ResetAfter = micros(rst)
		}
		return d
	}
	return e
}

func evalFixed(now int64, r Request, s *State) eval {
	period := int64(r.Limit.Period / time.Microsecond)
	rate, n := int64(r.Limit.Rate), int64(r.N)
	end, count := now+period, int64(0)
	if s != nil {
		end, count = s.A, s.B
	}
	allowed := count+n <= rate
	e := eval{allowed: allowed}
	if allowed {
		e.next = &State{A: end, B: count + n, Expires: end}
	}
	e.decide = func(now int64, r Request, consume bool) Decision {
		used := count
		if consume {
			used += n
		}
		d := Decision{Allowed: allowed, Remaining: int(rate - used)}
		if !allowed {
			d.RetryAfter = micros(end - now)
		}
		if used > 0 {
			d.ResetAfter = micros(end - now)
		}
		return d
	}
	return e
}

func evalLog(now int64, r Request, s *State) eval {
	period := int64(r.Limit.Period / time.Microsecond)
	rate, n := int64(r.Limit.Rate), int64(r.N)
	var log []LogEntry
	if s != nil {
		// Entries admitted at t count while now < t + period.
		i := 0
		for i < len(s.Log) && s.Log[i].At+period <= now {
			i++
		}
		log = s.Log[i:]
	}
	var count int64
	for _, e := range log {
		count += e.N
	}
	allowed := count+n <= rate
	// Entries are kept in order: a clock that went back does not reorder
	// them.
	ts := now
	if len(log) > 0 {
		ts = max(ts, log[len(log)-1].At)
	}
	e := eval{allowed: allowed}
	if allowed {
		nl := make([]LogEntry, len(log), len(log)+1)
		copy(nl, log)
		if len(nl) > 0 && nl[len(nl)-1].At == ts {
			nl[len(nl)-1].N += n
		} else {
			nl = append(nl, LogEntry{At: ts, N: n})
		}
		e.next = &State{Log: nl, Expires: ts + period}
	}
	e.decide = func(now int64, r Request, consume bool) Decision {
		used := count
		newest := int64(-1)
		if len(log) > 0 {
			newest = log[len(log)-1].At
		}
		if consume {
			used += n
			newest = ts
		}
		d := Decision{Allowed: allowed, Remaining: int(rate - used)}
		if !allowed {
			// Wait until the oldest entries holding need units expire.
			need, freed := count+n-rate, int64(0)
			for _, e := range log {
				freed += e.N
				if freed >= need {
					d.RetryAfter = micros(e.At + period - now)
					break
				}
			}
		}
		if newest >= 0 {
			d.ResetAfter = micros(newest + period - now)
		}
		return d
	}
	return e
}

// counterAt returns the previous and current counts of a sliding window
// counter in window w, given state in window sw.
func counterAt(w, sw, prev, cur int64) (int64, int64) {
	switch w - sw {
	case 0:
		return prev, cur
	case 1:
		return cur, 0
	}
	return 0, 0
}

// counterEstimate is the sliding window's estimate of units in the last
// period at now: the current window's count plus the previous window's
// weighted by the part of it still inside, in IEEE-754 double precision
// (the same operations in Go, Lua and PL/pgSQL give the same bits).
func counterEstimate(now, period, prev int64) float64 {
	w := now / period
	left := period - (now - w*period) // 1..period
	return float64(prev) * (float64(left) / float64(period))
}

// counterAllows reports whether n more units fit at now.
func counterAllows(now, period, rate, n, sw, prev, cur int64) bool {
	p, c := counterAt(now/period, sw, prev, cur)
	return float64(c+n)+counterEstimate(now, period, p) <= float64(rate)
}

func evalCounter(now int64, r Request, s *State) eval {
	period := int64(r.Limit.Period / time.Microsecond)
	rate, n := int64(r.Limit.Rate), int64(r.N)
	w := now / period
	var sw, sp, sc int64 = w, 0, 0
	if s != nil {
		sw, sp, sc = s.A, s.B, s.C
	}
	p, c := counterAt(w, sw, sp, sc)
	est := counterEstimate(now, period, p)
	allowed := float64(c+n)+est <= float64(rate)
	e := eval{allowed: allowed}
	if allowed {
		e.next = &State{A: w, B: p, C: c + n, Expires: (w + 2) * period}
	}
	e.decide = func(now int64, r Request, consume bool) Decision {
		cc := c
		if consume {
			cc += n
		}
		d := Decision{Allowed: allowed}
		d.Remaining = int(max(0, min(rate, int64(math.Floor(float64(rate-cc)-est)))))
		if !allowed {
			// The estimate only falls as time passes (also across window
			// boundaries), so search for the first microsecond at which
			// n units fit: it is at the latest the start of window w+2.
			lo, hi := now+1, (w+2)*period
			for lo < hi {
				mid := lo + (hi-lo)/2
				if counterAllows(mid, period, rate, n, w, p, c) {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			d.RetryAfter = micros(lo - now)
		}
		switch {
		case cc > 0:
			d.ResetAfter = micros((w+2)*period - now)
		case p > 0:
			d.ResetAfter = micros((w+1)*period - now)
		}
		return d
	}
	return e
}

// permitState returns the unexpired permits of s at now.
func permitState(now int64, s *State) (held []PermitEntry, last int64) {
	if s == nil || s.Expires <= now {
		return nil, 0
	}
	for _, p := range s.Permits {
		if p.Expires > now {
			held = append(held, p)
		}
	}
	return held, s.A
}

// permitNext builds the state to store: it lives until its last permit
// expires, and at least until the clock passed the last fence, so that a
// fence taken from the clock after the state expired is above it.
func permitNext(now int64, held []PermitEntry, last int64) *State {
	exp := last + 1
	for _, p := range held {
		exp = max(exp, p.Expires)
	}
	if exp <= now {
		return nil
	}
	return &State{A: last, Permits: held, Expires: exp}
}

// EvaluateAcquire is the reference implementation of Store.AcquirePermit
// on s (nil: no state) at now. It returns the grant and the state to store
// (nil: delete it), also when no permit was granted (expired permits are
// dropped). The arguments must be valid ([ValidatePermit]).
func EvaluateAcquire(now time.Time, s *State, id string, permits int, ttl time.Duration) (PermitGrant, *State) {
	us := now.UnixMicro()
	held, last := permitState(us, s)
	g := PermitGrant{At: time.UnixMicro(us)}
	exp := us + int64(ttl/time.Microsecond)
	if i := slices.IndexFunc(held, func(p PermitEntry) bool { return p.ID == id }); i >= 0 {
		held[i].Expires = exp
		g.Acquired, g.Fence, g.TTL, g.InUse = true, uint64(held[i].Fence), ttl, len(held)
		return g, permitNext(us, held, last)
	}
	if len(held) >= permits {
		soonest := held[0].Expires
		for _, p := range held {
			soonest = min(soonest, p.Expires)
		}
		g.InUse, g.RetryAfter = len(held), micros(soonest-us)
		return g, permitNext(us, held, last)
	}
	fence := max(last+1, us)
	held = append(held, PermitEntry{ID: id, Fence: fence, Expires: exp})
	g.Acquired, g.Fence, g.TTL, g.InUse = true, uint64(fence), ttl, len(held)
	return g, permitNext(us, held, fence)
}

// EvaluateRenew is the reference implementation of Store.RenewPermit. A
// nil state with a nil error means nothing changes.
func EvaluateRenew(now time.Time, s *State, id string, ttl time.Duration) (PermitGrant, *State, error) {
	us := now.UnixMicro()
	held, last := permitState(us, s)
	i := slices.IndexFunc(held, func(p PermitEntry) bool { return p.ID == id })
	if i < 0 {
		return PermitGrant{At: time.UnixMicro(us), InUse: len(held)}, nil, ErrPermitLost
	}
	held[i].Expires = us + int64(ttl/time.Microsecond)
	g := PermitGrant{Acquired: true, Fence: uint64(held[i].Fence), TTL: ttl, InUse: len(held), At: time.UnixMicro(us)}
	return g, permitNext(us, held, last), nil
}

// EvaluateRelease is the reference implementation of Store.ReleasePermit.
// It returns the state to store (nil: delete it) or ErrPermitLost, in
// which case nothing changes.
func EvaluateRelease(now time.Time, s *State, id string) (*State, error) {
	us := now.UnixMicro()
	held, last := permitState(us, s)
	i := slices.IndexFunc(held, func(p PermitEntry) bool { return p.ID == id })
	if i < 0 {
		return nil, ErrPermitLost
	}
	held = slices.Delete(held, i, i+1)
	return permitNext(us, held, last), nil
}

// stateVersion is the first byte of an encoded State.
const stateVersion = 1

// MarshalBinary encodes s (for stores that keep it as bytes).
func (s *State) MarshalBinary() ([]byte, error) {
	b := []byte{stateVersion}
	b = binary.AppendVarint(b, s.A)
	b = binary.AppendVarint(b, s.B)
	b = binary.AppendVarint(b, s.C)
	b = binary.AppendVarint(b, s.Expires)
	b = binary.AppendUvarint(b, uint64(len(s.Log)))
	for _, e := range s.Log {
		b = binary.AppendVarint(b, e.At)
		b = binary.AppendVarint(b, e.N)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Permits)))
	for _, p := range s.Permits {
		b = binary.AppendUvarint(b, uint64(len(p.ID)))
		b = append(b, p.ID...)
		b = binary.AppendVarint(b, p.Fence)
		b = binary.AppendVarint(b, p.Expires)
	}
	return b, nil
}

var errMalformed = errors.New("ratelimit: malformed state")

// UnmarshalBinary decodes what MarshalBinary encoded.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != stateVersion {
		return errMalformed
	}
	b = b[1:]
	bad := false
	vi := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	vu := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	*s = State{A: vi(), B: vi(), C: vi(), Expires: vi()}
	n := vu()
	if bad || n > uint64(len(b)) {
		return errMalformed
	}
	if n > 0 {
		s.Log = make([]LogEntry, n)
		for i := range s.Log {
			s.Log[i] = LogEntry{At: vi(), N: vi()}
		}
	}
	n = vu()
	if bad || n > uint64(len(b)) {
		return errMalformed
	}
	if n > 0 {
		s.Permits = make([]PermitEntry, n)
		for i := range s.Permits {
			l := vu()
			if bad || l > uint64(len(b)) {
				return errMalformed
			}
			id := string(b[:l])
			b = b[l:]
			s.Permits[i] = PermitEntry{ID: id, Fence: vi(), Expires: vi()}
		}
	}
	if bad || len(b) != 0 {
		return errMalformed
	}
	return nil
}
