package driver

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
// (memstore, sqlitestore, the ratelimit middleware's local limiter) keep it and [Evaluate] reads and writes it. The
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
// otherwise next is nil and nothing must be written. A state to store may
// be states[i] itself, updated in place (only when it is returned in
// next). The requests must be valid ([ValidateRequests]).
func Evaluate(now time.Time, reqs []Request, states []*State, commit bool) (ds []Decision, next []*State) {
	if len(reqs) == 1 {
		d, st := EvaluateOne(now, &reqs[0], states[0], commit)
		if st != nil {
			next = []*State{st}
		}
		return []Decision{d}, next
	}
	us := now.UnixMicro()
	at := time.UnixMicro(us)
	evals := make([]eval, len(reqs))
	all := true
	for i := range reqs {
		evals[i].judge(us, &reqs[i], states[i])
		all = all && evals[i].allowed
	}
	consume := commit && all
	ds = make([]Decision, len(reqs))
	if consume {
		next = make([]*State, len(reqs))
	}
	for i := range reqs {
		e := &evals[i]
		ds[i] = e.decision(us, &reqs[i], consume)
		ds[i].At = at
		if consume {
			next[i] = e.next(us, &reqs[i], states[i])
		}
	}
	return ds, next
}

// EvaluateOne is Evaluate for a single request, without allocating: the
// state to store (nil when nothing must be written) is s itself, updated in
// place, when s is not nil.
func EvaluateOne(now time.Time, r *Request, s *State, commit bool) (Decision, *State) {
	if r.Algorithm == GCRA {
		var d Decision // filled in place: the decision is copied once
		st := gcraOne(&d, now, r, s, commit)
		return d, st
	}
	return evaluateOne(now, r, s, commit)
}

// evaluateOne is EvaluateOne for the window and log algorithms.
func evaluateOne(now time.Time, r *Request, s *State, commit bool) (Decision, *State) {
	us := now.UnixMicro()
	var e eval
	e.judge(us, r, s)
	consume := commit && e.allowed
	d := e.decision(us, r, consume)
	d.At = now.Add(-time.Duration(now.Nanosecond() % 1000)).Round(0) // time.UnixMicro(us)
	if !consume {
		return d, nil
	}
	return d, e.next(us, r, s)
}

// gcraOne is EvaluateOne for a GCRA request: the arithmetic of judge,
// decision and next for GCRA alone, on the request's cached constants. It
// fills d and returns the state to store (nil: nothing to write).
func gcraOne(d *Decision, now time.Time, r *Request, s *State, commit bool) *State {
	us := now.UnixMicro()
	g := r.gcra
	if g == nil || g.rate != int64(r.Limit.Rate) || g.period != int64(r.Limit.Period/time.Microsecond) || g.burst != int64(r.Limit.Burst) {
		p := newGCRA(r.Limit)
		g = &p
	}
	nowp := pair{us, 0}
	tat := nowp
	if s.live(us) {
		t := pair{s.A, s.B}
		if s.C != g.rate && s.C > 0 {
			// Stored under another rate: convert the fraction, rounding
			// up.
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
	*d = Decision{Allowed: !nowp.less(allowAt), Limit: r.Limit, Algorithm: GCRA}
	d.At = now.Add(-time.Duration(now.Nanosecond() % 1000)).Round(0) // time.UnixMicro(us)
	consume := commit && d.Allowed
	base := tat
	if consume {
		base = newTAT
	}
	// Remaining = floor((tau - (base - now)) / T).
	ahead := base.sub(nowp, g.rate)
	d.Remaining = int(min(g.floorDiv(g.tau.sub(ahead, g.rate)), int64(r.Limit.Burst)))
	if !d.Allowed {
		d.RetryAfter = micros(allowAt.sub(nowp, g.rate).ceil())
	}
	if rst := ahead.ceil(); rst > 0 {
		d.ResetAfter = micros(rst)
	}
	if !consume {
		return nil
	}
	if s == nil {
		s = new(State)
	}
	*s = State{A: newTAT.a, B: newTAT.b, C: g.rate, Expires: newTAT.ceil()}
	return s
}

// eval is the judgement of one request before the call's outcome is known:
// whether it is allowed, and what the decision and the next state need.
type eval struct {
	allowed bool
	// GCRA
	g                    gcraParams
	tat, newTAT, allowAt pair
	// fixed window: the window's end and its count; sliding window: the
	// window index, the previous and current counts and the estimate;
	// sliding log: the live entries, their count and the new entry's time.
	end, count int64
	w, p, c    int64
	est        float64
	log        []LogEntry
	ts         int64
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
	rate, period, burst int64
	t, tau              pair
}

func newGCRA(l Limit) gcraParams {
	g := gcraParams{rate: int64(l.Rate), period: int64(l.Period / time.Microsecond), burst: int64(l.Burst)}
	g.t = pair{g.period / g.rate, g.period % g.rate}
	g.tau = g.mul(int64(l.Burst))
	return g
}

// mul returns x*T exactly (x*T.b < 2^53 within the package's bounds).
func (g *gcraParams) mul(x int64) pair {
	if x == 1 {
		return g.t
	}
	p := x * g.t.b
	return pair{x*g.t.a + p/g.rate, p % g.rate}
}

// floorDiv returns floor(x / T) for x >= 0: (x.a*rate + x.b) / period,
// in 128-bit arithmetic.
func (g *gcraParams) floorDiv(x pair) int64 {
	if x.a < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x.a), uint64(g.rate))
	lo, carry := bits.Add64(lo, uint64(x.b), 0)
	hi += carry
	if hi == 0 {
		return int64(lo / uint64(g.period))
	}
	if hi >= uint64(g.period) {
		return math.MaxInt64 // cannot happen within bounds
	}
	q, _ := bits.Div64(hi, lo, uint64(g.period))
	return int64(q)
}

// judge evaluates r against s (nil or expired: no state) at now.
func (e *eval) judge(now int64, r *Request, s *State) {
	if !s.live(now) {
		s = nil
	}
	period := int64(r.Limit.Period / time.Microsecond)
	rate, n := int64(r.Limit.Rate), int64(r.N)
	switch r.Algorithm {
	case GCRA:
		if p := r.gcra; p != nil && p.rate == rate && p.period == period && p.burst == int64(r.Limit.Burst) {
			e.g = *p // computed once by the Limiter
		} else {
			e.g = newGCRA(r.Limit)
		}
		g := &e.g
		nowp := pair{now, 0}
		e.tat = nowp
		if s != nil {
			t := pair{s.A, s.B}
			if s.C != g.rate && s.C > 0 {
				// Stored under another rate: convert the fraction,
				// rounding up.
				t.b = (s.B*g.rate + s.C - 1) / s.C
				if t.b >= g.rate {
					t.a++
					t.b -= g.rate
				}
			}
			if nowp.less(t) {
				e.tat = t
			}
		}
		e.newTAT = e.tat.add(g.mul(n), g.rate)
		e.allowAt = e.newTAT.sub(g.tau, g.rate)
		e.allowed = !nowp.less(e.allowAt)
	case FixedWindow:
		e.end, e.count = now+period, 0
		if s != nil {
			e.end, e.count = s.A, s.B
		}
		e.allowed = e.count+n <= rate
	case SlidingLog:
		if s != nil {
			// Entries admitted at t count while now < t + period.
			i := 0
			for i < len(s.Log) && s.Log[i].At+period <= now {
				i++
			}
			e.log = s.Log[i:]
		}
		for _, x := range e.log {
			e.count += x.N
		}
		e.allowed = e.count+n <= rate
		// Entries are kept in order: a clock that went back does not
		// reorder them.
		e.ts = now
		if len(e.log) > 0 {
			e.ts = max(e.ts, e.log[len(e.log)-1].At)
		}
	case SlidingWindow:
		e.w = now / period
		sw, sp, sc := e.w, int64(0), int64(0)
		if s != nil {
			sw, sp, sc = s.A, s.B, s.C
		}
		e.p, e.c = counterAt(e.w, sw, sp, sc)
		e.est = counterEstimate(now, period, e.p)
		e.allowed = float64(e.c+n)+e.est <= float64(rate)
	default:
		panic(fmt.Sprintf("ratelimit: unknown algorithm %d", r.Algorithm))
	}
}

// decision computes the decision once it is known whether the call
// consumes (every request allowed, and commit). At is left to the caller.
func (e *eval) decision(now int64, r *Request, consume bool) Decision {
	period := int64(r.Limit.Period / time.Microsecond)
	rate, n := int64(r.Limit.Rate), int64(r.N)
	d := Decision{Allowed: e.allowed, Limit: r.Limit, Algorithm: r.Algorithm}
	switch r.Algorithm {
	case GCRA:
		g, nowp := e.g, pair{now, 0}
		base := e.tat
		if consume {
			base = e.newTAT
		}
		// Remaining = floor((tau - (base - now)) / T).
		x := g.tau.sub(base.sub(nowp, g.rate), g.rate)
		d.Remaining = int(min(g.floorDiv(x), int64(r.Limit.Burst)))
		if !e.allowed {
			d.RetryAfter = micros(e.allowAt.sub(nowp, g.rate).ceil())
		}
		if rst := base.sub(nowp, g.rate).ceil(); rst > 0 {
			d.ResetAfter = micros(rst)
		}
	case FixedWindow:
		used := e.count
		if consume {
			used += n
		}
		d.Remaining = int(rate - used)
		if !e.allowed {
			d.RetryAfter = micros(e.end - now)
		}
		if used > 0 {
			d.ResetAfter = micros(e.end - now)
		}
	case SlidingLog:
		used := e.count
		newest := int64(-1)
		if len(e.log) > 0 {
			newest = e.log[len(e.log)-1].At
		}
		if consume {
			used += n
			newest = e.ts
		}
		d.Remaining = int(rate - used)
		if !e.allowed {
			// Wait until the oldest entries holding need units expire.
			need, freed := e.count+n-rate, int64(0)
			for _, x := range e.log {
				freed += x.N
				if freed >= need {
					d.RetryAfter = micros(x.At + period - now)
					break
				}
			}
		}
		if newest >= 0 {
			d.ResetAfter = micros(newest + period - now)
		}
	case SlidingWindow:
		cc := e.c
		if consume {
			cc += n
		}
		d.Remaining = int(max(0, min(rate, int64(math.Floor(float64(rate-cc)-e.est)))))
		if !e.allowed {
			// The estimate only falls as time passes (also across window
			// boundaries), so search for the first microsecond at which
			// n units fit: it is at the latest the start of window w+2.
			lo, hi := now+1, (e.w+2)*period
			for lo < hi {
				mid := lo + (hi-lo)/2
				if counterAllows(mid, period, rate, n, e.w, e.p, e.c) {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			d.RetryAfter = micros(lo - now)
		}
		switch {
		case cc > 0:
			d.ResetAfter = micros((e.w+2)*period - now)
		case e.p > 0:
			d.ResetAfter = micros((e.w+1)*period - now)
		}
	}
	return d
}

// next returns the state to store after consuming r's units: s updated in
// place when s is not nil, else a new State.
func (e *eval) next(now int64, r *Request, s *State) *State {
	period := int64(r.Limit.Period / time.Microsecond)
	n := int64(r.N)
	if s == nil {
		s = new(State)
	}
	switch r.Algorithm {
	case GCRA:
		*s = State{A: e.newTAT.a, B: e.newTAT.b, C: e.g.rate, Expires: e.newTAT.ceil()}
	case FixedWindow:
		*s = State{A: e.end, B: e.count + n, Expires: e.end}
	case SlidingLog:
		// e.log may alias s.Log: move the live entries to the front of
		// s.Log's array, then add the new one.
		log := append(s.Log[:0], e.log...)
		if len(log) > 0 && log[len(log)-1].At == e.ts {
			log[len(log)-1].N += n
		} else {
			log = append(log, LogEntry{At: e.ts, N: n})
		}
		*s = State{Log: log, Expires: e.ts + period}
	case SlidingWindow:
		*s = State{A: e.w, B: e.p, C: e.c + n, Expires: (e.w + 2) * period}
	}
	return s
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

// counterEstimate is the sliding window's estimate of the previous window's
// units still inside the sliding window at now: the previous window's
// count weighted by the part of it still inside, in IEEE-754 double
// precision (the same operations in Go, Lua and PL/pgSQL give the same
// bits).
func counterEstimate(now, period, prev int64) float64 {
	w := now / period
	left := period - (now - w*period) // 1..period
	return float64(prev) * (float64(left) / float64(period))
}

// counterAllows reports whether n more units fit at now, for state in
// window sw.
func counterAllows(now, period, rate, n, sw, prev, cur int64) bool {
	p, c := counterAt(now/period, sw, prev, cur)
	return float64(c+n)+counterEstimate(now, period, p) <= float64(rate)
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
