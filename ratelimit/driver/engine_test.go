package driver

import (
	"math"
	"math/big"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The reference engine (Evaluate) is checked here against specifications
// written independently and naively: a token bucket in exact rationals
// (GCRA), a list of admitted units (the log and the windows), brute-force
// searches for RetryAfter. Every store is then checked against Evaluate by
// the conformance suite.

// event is an admitted request.
type event struct{ at, n int64 }

// specState is what the specifications keep: every admitted request, plus
// the token bucket.
type specState struct {
	events []event
	// token bucket (GCRA): tokens at time last.
	tokens *big.Rat
	last   int64
}

func ratInt(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// ceilRat rounds a non-negative rational up to an integer.
func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func floorRat(r *big.Rat) int64 {
	if r.Sign() < 0 {
		return -ceilRat(new(big.Rat).Neg(r))
	}
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64()
}

// specDecide is the specification of one decision at now.
func specDecide(alg Algorithm, l Limit, st *specState, now, n int64, consume bool) Decision {
	P := int64(l.Period / time.Microsecond)
	R, B := int64(l.Rate), int64(l.Burst)
	var d Decision
	switch alg {
	case GCRA:
		// Token bucket: capacity B, refills R per P, exactly.
		tokens := ratInt(B)
		if st.tokens != nil {
			refill := new(big.Rat).Mul(ratInt(now-st.last), big.NewRat(R, P))
			tokens = new(big.Rat).Add(st.tokens, refill)
			if tokens.Cmp(ratInt(B)) > 0 {
				tokens = ratInt(B)
			}
		}
		d.Allowed = tokens.Cmp(ratInt(n)) >= 0
		after := tokens
		if d.Allowed && consume {
			after = new(big.Rat).Sub(tokens, ratInt(n))
			st.tokens, st.last = after, now
			st.events = append(st.events, event{now, n})
		}
		d.Remaining = int(floorRat(after))
		perToken := big.NewRat(P, R)
		if !d.Allowed {
			need := new(big.Rat).Sub(ratInt(n), tokens)
			d.RetryAfter = micros(ceilRat(need.Mul(need, perToken)))
		}
		missing := new(big.Rat).Sub(ratInt(B), after)
		d.ResetAfter = micros(ceilRat(missing.Mul(missing, perToken)))
	case FixedWindow:
		// Windows start at the first admitted request after the last one
		// ended.
		var start int64 = -1
		var used int64
		for _, e := range st.events {
			if start < 0 || e.at >= start+P {
				start, used = e.at, 0
			}
			used += e.n
		}
		if start < 0 || now >= start+P {
			start, used = now, 0
		}
		d.Allowed = used+n <= R
		if d.Allowed && consume {
			used += n
			st.events = append(st.events, event{now, n})
		}
		d.Remaining = int(R - used)
		if !d.Allowed {
			d.RetryAfter = micros(start + P - now)
		}
		if used > 0 {
			d.ResetAfter = micros(start + P - now)
		}
	case SlidingLog:
		inWindow := func(t int64) int64 {
			var c int64
			for _, e := range st.events {
				if e.at > t-P && e.at <= t {
					c += e.n
				}
			}
			return c
		}
		used := inWindow(now)
		d.Allowed = used+n <= R
		if d.Allowed && consume {
			used += n
			st.events = append(st.events, event{now, n})
		}
		d.Remaining = int(R - used)
		if !d.Allowed {
			// The first later instant at which the window holds room for
			// n: counts only drop when an event leaves, at e.at+P.
			best := int64(math.MaxInt64)
			for _, e := range st.events {
				if t := e.at + P; t > now && inWindow(t)+n <= R && t < best {
					best = t
				}
			}
			d.RetryAfter = micros(best - now)
		}
		var newest int64 = -1
		for _, e := range st.events {
			if e.at > now-P {
				newest = max(newest, e.at)
			}
		}
		if newest >= 0 {
			d.ResetAfter = micros(newest + P - now)
		}
	case SlidingWindow:
		count := func(w int64) int64 {
			var c int64
			for _, e := range st.events {
				if e.at/P == w {
					c += e.n
				}
			}
			return c
		}
		est := func(t int64, extra int64) float64 {
			w := t / P
			prev, cur := count(w-1), count(w)
			if w == now/P {
				cur += extra
			} else if w == now/P+1 {
				prev += extra
			}
			left := P - (t - w*P)
			return float64(cur) + float64(prev)*(float64(left)/float64(P))
		}
		w := now / P
		d.Allowed = est(now, 0)+float64(n) <= float64(R)
		var extra int64
		if d.Allowed && consume {
			extra = n
		}
		d.Remaining = int(max(0, min(R, int64(math.Floor(float64(R)-est(now, extra))))))
		if !d.Allowed {
			for t := now + 1; ; t++ {
				if est(t, 0)+float64(n) <= float64(R) {
					d.RetryAfter = micros(t - now)
					break
				}
			}
		}
		if cur := count(w) + extra; cur > 0 {
			d.ResetAfter = micros((w+2)*P - now)
		} else if count(w-1) > 0 {
			d.ResetAfter = micros((w+1)*P - now)
		}
		if d.Allowed && consume {
			st.events = append(st.events, event{now, n})
		}
	}
	return d
}

// drawSpecLimit draws a small limit; sliding windows get short periods so
// that the brute-force RetryAfter search stays fast.
func drawSpecLimit(t *rapid.T, alg Algorithm) Limit {
	l := Limit{Rate: rapid.IntRange(1, 7).Draw(t, "rate")}
	switch alg {
	case SlidingWindow:
		l.Period = time.Duration(rapid.Int64Range(1_000, 3_000).Draw(t, "period_us")) * time.Microsecond
	default:
		l.Period = time.Duration(rapid.Int64Range(1_000, 2_000_000).Draw(t, "period_us")) * time.Microsecond
	}
	if alg == GCRA {
		l.Burst = rapid.IntRange(0, 10).Draw(t, "burst")
	}
	nl, err := Normalize(alg, l)
	if err != nil {
		t.Fatal(err)
	}
	return nl
}

// TestEvaluateMatchesSpec drives Evaluate and the specifications with the
// same random calls and times and requires the same decisions.
func TestEvaluateMatchesSpec(t *testing.T) {
	for _, alg := range []Algorithm{GCRA, FixedWindow, SlidingLog, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				l := drawSpecLimit(rt, alg)
				P := int64(l.Period / time.Microsecond)
				now := rapid.Int64Range(1_700_000_000_000_000, 1_800_000_000_000_000).Draw(rt, "start")
				var st *State
				spec := &specState{}
				key := StateKey{Group: "", Name: l.Name, Kind: alg.code(), Key: "k"}
				// Boundaries are where off-by-one errors hide: the moment a
				// RetryAfter or ResetAfter ends (and the microsecond
				// before), when an admitted request leaves the window, the
				// next aligned window.
				var marks []int64
				for range rapid.IntRange(1, 60).Draw(rt, "steps") {
					var ahead []int64
					for _, m := range marks {
						if m >= now {
							ahead = append(ahead, m)
						}
					}
					if len(ahead) > 0 && rapid.Bool().Draw(rt, "to_mark") {
						now = rapid.SampledFrom(ahead).Draw(rt, "mark")
					} else {
						now += rapid.Int64Range(0, 2*P).Draw(rt, "advance")
					}
					commit := rapid.IntRange(0, 3).Draw(rt, "peek") != 0
					lo := 1
					if !commit {
						lo = 0
					}
					n := rapid.IntRange(lo, l.Capacity()).Draw(rt, "n")
					r := Request{Key: key, Algorithm: alg, Limit: l, N: n}
					var gd Decision
					var gs *State
					if alg == GCRA {
						// The general path, on a copy: the single-request
						// fast path must agree with it.
						var cp *State
						if st != nil {
							c := *st
							cp = &c
						}
						gd, gs = evalGeneric(now, &r, cp, commit)
					}
					ds, next := Evaluate(time.UnixMicro(now), []Request{r}, []*State{st}, commit)
					if alg == GCRA {
						fd := ds[0]
						sameAt := fd.At.Equal(gd.At)
						fd.At, gd.At = time.Time{}, time.Time{}
						if fd != gd || !sameAt || (gs == nil) != (next == nil) || (gs != nil && !reflect.DeepEqual(gs, next[0])) {
							rt.Fatalf("at %d, n=%d commit=%v: fast path %+v %v, general path %+v %v", now, n, commit, ds[0], next, gd, gs)
						}
					}
					want := specDecide(alg, l, spec, now, int64(n), commit)
					got := ds[0]
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
						rt.Fatalf("at %d, n=%d commit=%v: engine {allowed=%v remaining=%d retry=%v reset=%v}, spec {allowed=%v remaining=%d retry=%v reset=%v}",
							now, n, commit, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter,
							want.Allowed, want.Remaining, want.RetryAfter, want.ResetAfter)
					}
					us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
					marks = append(marks[:0:0], now+us(got.RetryAfter), now+us(got.RetryAfter)-1, now+us(got.ResetAfter), now+us(got.ResetAfter)-1, (now/P+1)*P, (now/P+1)*P-1)
					for _, e := range spec.events {
						marks = append(marks, e.at+P, e.at+P-1)
					}
					if !got.At.Equal(time.UnixMicro(now)) {
						rt.Fatalf("At = %v, want %v", got.At, time.UnixMicro(now))
					}
					if commit && got.Allowed {
						if next == nil || next[0] == nil || next[0].Expires <= now {
							rt.Fatalf("allowed without a state to store that lives past now: %+v", next)
						}
						st = next[0]
					} else if next != nil {
						rt.Fatal("a peek or a denial returned state to write")
					}
				}
				checkWindows(rt, alg, l, spec.events)
			})
		})
	}
}

// checkWindows checks the admitted requests directly against what each
// algorithm promises: never more than it allows in any window.
func checkWindows(t *rapid.T, alg Algorithm, l Limit, events []event) {
	P, R, B := int64(l.Period/time.Microsecond), int64(l.Rate), int64(l.Burst)
	for i := range events {
		var sum int64
		for j := i; j < len(events); j++ {
			sum += events[j].n
			span := events[j].at - events[i].at
			switch alg {
			case GCRA:
				// In any interval of length span: at most the bucket plus
				// what refills in span.
				limit := new(big.Rat).Add(ratInt(B), new(big.Rat).Mul(ratInt(span), big.NewRat(R, P)))
				if ratInt(sum).Cmp(limit) > 0 {
					t.Fatalf("GCRA admitted %d units within %dµs (bucket %d, %d per %dµs)", sum, span, B, R, P)
				}
			case SlidingLog:
				if span < P && sum > R {
					t.Fatalf("sliding log admitted %d units within %dµs, limit %d per %dµs", sum, span, R, P)
				}
			case FixedWindow, SlidingWindow:
				// Never more than twice the rate in any period.
				if span < P && sum > 2*R {
					t.Fatalf("%v admitted %d units within %dµs, limit %d per %dµs", alg, sum, span, R, P)
				}
			}
		}
	}
	if alg == SlidingWindow {
		per := map[int64]int64{}
		for _, e := range events {
			per[e.at/P] += e.n
			if per[e.at/P] > R {
				t.Fatalf("sliding window admitted %d units in one aligned window, limit %d", per[e.at/P], R)
			}
		}
	}
}

// TestEvaluateGroupAllOrNothing: a group consumes from every limit or from
// none.
func TestEvaluateGroupAllOrNothing(t *testing.T) {
	now := time.UnixMicro(1_750_000_000_000_000)
	a, _ := Normalize(GCRA, Limit{Name: "a", Rate: 2, Period: time.Second})
	b, _ := Normalize(FixedWindow, Limit{Name: "b", Rate: 4, Period: time.Second})
	reqs := []Request{
		{Key: StateKey{Group: "g", Name: "a", Kind: "g", Key: "u"}, Algorithm: GCRA, Limit: a, N: 2},
		{Key: StateKey{Group: "g", Name: "b", Kind: "f", Key: "all"}, Algorithm: FixedWindow, Limit: b, N: 2},
	}
	states := []*State{nil, nil}
	ds, next := Evaluate(now, reqs, states, true)
	if !ds[0].Allowed || !ds[1].Allowed || next == nil || ds[0].Remaining != 0 || ds[1].Remaining != 2 {
		t.Fatalf("first: %+v %v", ds, next)
	}
	states = next
	// a is empty: denied, and b must not be charged.
	ds, next = Evaluate(now, reqs, states, true)
	if ds[0].Allowed || !ds[1].Allowed || next != nil || ds[1].Remaining != 2 {
		t.Fatalf("second: %+v %v", ds, next)
	}
}

// TestStateEncoding round-trips states and refuses malformed bytes.
func TestStateEncoding(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := State{
			A: rapid.Int64().Draw(t, "a"), B: rapid.Int64().Draw(t, "b"), C: rapid.Int64().Draw(t, "c"),
			Expires: rapid.Int64().Draw(t, "exp"),
		}
		for range rapid.IntRange(0, 5).Draw(t, "log") {
			s.Log = append(s.Log, LogEntry{At: rapid.Int64().Draw(t, "at"), N: rapid.Int64().Draw(t, "n")})
		}
		for range rapid.IntRange(0, 5).Draw(t, "permits") {
			s.Permits = append(s.Permits, PermitEntry{ID: rapid.StringN(0, 20, 64).Draw(t, "id"), Fence: rapid.Int64().Draw(t, "f"), Expires: rapid.Int64().Draw(t, "e")})
		}
		b, _ := s.MarshalBinary()
		var got State
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		b2, _ := got.MarshalBinary()
		if string(b) != string(b2) || got.A != s.A || got.Expires != s.Expires || len(got.Log) != len(s.Log) || len(got.Permits) != len(s.Permits) {
			t.Fatalf("round trip: %+v -> %+v", s, got)
		}
		if cut := rapid.IntRange(0, len(b)-1).Draw(t, "cut"); cut < len(b) {
			var bad State
			if err := bad.UnmarshalBinary(b[:cut]); err == nil {
				t.Fatalf("decoded %d of %d bytes without error", cut, len(b))
			}
		}
	})
}

// evalGeneric is EvaluateOne through the general path (eval), which groups
// take.
func evalGeneric(us int64, r *Request, s *State, commit bool) (Decision, *State) {
	var e eval
	e.judge(us, r, s)
	consume := commit && e.allowed
	d := e.decision(us, r, consume)
	d.At = time.UnixMicro(us)
	if !consume {
		return d, nil
	}
	return d, e.next(us, r, s)
}
