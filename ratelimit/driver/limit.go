package driver

import (
	"encoding/json"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on what a Limit, a key and a cost may be. Every store keeps its
// arithmetic exact within them (Redis scripts compute in Lua's doubles,
// which hold integers up to 2^53), so they are checked before anything is
// written.
const (
	// MaxRate is the largest Rate and Burst.
	MaxRate = 50_000_000
	// MaxLogRate is the largest Rate of a SlidingLog limit, which keeps one
	// entry per admitted unit.
	MaxLogRate = 10_000
	// MinPeriod is the shortest Period.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest Period, and the longest time a GCRA bucket
	// may take to refill from empty (Period × Burst / Rate).
	MaxPeriod = 366 * 24 * time.Hour
	// MaxKeyLen is the longest key in bytes.
	MaxKeyLen = 512
	// MaxNameLen is the longest limit or group name in bytes.
	MaxNameLen = 64
)

var (
	// ErrInvalid reports a bad limit, key, name or cost. Nothing was
	// written.
	ErrInvalid = kind.New("ratelimit: invalid argument", tenure.ErrInvalid)
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. A decision that was sent may have been applied (units may
	// have been consumed). The HTTP middleware turns it into its failure
	// policy; it is never reported as "allowed".
	ErrUnavailable = kind.New("ratelimit: store unavailable", tenure.ErrUnavailable)
	// ErrPermitLost reports that a permit is no longer held: it expired
	// (its holder did not renew it in time) or was released.
	ErrPermitLost = kind.New("ratelimit: permit lost", tenure.ErrLost)
)

// Algorithm selects how a Limit is enforced. The zero value is GCRA.
type Algorithm int

const (
	// GCRA is the generic cell rate algorithm: a token bucket that holds
	// Burst units and refills Rate units per Period, kept as one
	// timestamp (the theoretical arrival time). Exact, O(1) state, and an
	// exact RetryAfter. The default.
	GCRA Algorithm = iota
	// FixedWindow admits Rate units per window of Period. A window starts
	// with the first admitted request after the previous window ended (it
	// is not aligned to the clock). Up to twice Rate can pass around a
	// window boundary.
	FixedWindow
	// SlidingLog admits at most Rate units in every interval of length
	// Period, exactly, by remembering each admitted unit for Period.
	// Memory is O(Rate) per key, so Rate is at most MaxLogRate.
	SlidingLog
	// SlidingWindow is the sliding window counter (two buckets): windows of
	// Period aligned to the Unix epoch, and an estimate that weights the
	// previous window's count by the part of it still inside the sliding
	// window. Constant memory, approximate: the estimate assumes the
	// previous window's units were spread evenly.
	SlidingWindow
)

// code is the short form of an algorithm in store keys.
func (a Algorithm) code() string {
	switch a {
	case GCRA:
		return "g"
	case FixedWindow:
		return "f"
	case SlidingLog:
		return "l"
	case SlidingWindow:
		return "w"
	}
	return "?"
}

// String returns the algorithm's name: "gcra", "fixed-window",
// "sliding-log" or "sliding-window".
func (a Algorithm) String() string {
	switch a {
	case GCRA:
		return "gcra"
	case FixedWindow:
		return "fixed-window"
	case SlidingLog:
		return "sliding-log"
	case SlidingWindow:
		return "sliding-window"
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

func (a Algorithm) valid() bool { return a >= GCRA && a <= SlidingWindow }

// Limit is a quota: Rate units per Period.
type Limit struct {
	// Name names the limit: it separates the state of different limits on
	// the same keys, and is the policy name in the RateLimit-Policy and
	// RateLimit header fields. Limiters with the same Name, Algorithm and
	// key share their state (that is how several processes enforce one
	// limit). 1 to MaxNameLen bytes of letters, digits, '.', '_' and '-'.
	// Default: derived from the parameters, e.g. "100-per-1m0s" (so a
	// changed limit starts with fresh state).
	Name string
	// Rate is the number of units admitted per Period: 1 to MaxRate
	// (MaxLogRate for SlidingLog).
	Rate int
	// Period is the time Rate applies to: MinPeriod to MaxPeriod, in
	// whole microseconds. Sub-second periods work on every store.
	Period time.Duration
	// Burst is the size of the GCRA bucket: how many units may pass at
	// once after a quiet spell. Default (0): Rate. At most MaxRate, and the
	// bucket must refill in at most MaxPeriod (Period × Burst / Rate). The
	// window algorithms take no Burst: it must be 0 or equal to Rate.
	Burst int
}

// String describes the limit, e.g. "100-per-1m0s: 100 per 1m0s (burst 20)".
func (l Limit) String() string {
	s := fmt.Sprintf("%s: %d per %v", l.Name, l.Rate, l.Period)
	if l.Burst != 0 && l.Burst != l.Rate {
		s += fmt.Sprintf(" (burst %d)", l.Burst)
	}
	return s
}

// Capacity is the most units one request can ask for: Burst for GCRA, Rate
// for the window algorithms (after defaults are applied).
func (l Limit) Capacity() int {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// defaultName derives a name from the parameters.
func (l Limit) defaultName() string {
	n := strconv.Itoa(l.Rate) + "-per-" + l.Period.String()
	if l.Burst != 0 && l.Burst != l.Rate {
		n += "-burst-" + strconv.Itoa(l.Burst)
	}
	return n
}

// Normalize validates l for algorithm a and fills in the defaults (Name,
// Burst), as package ratelimit's constructors do. Errors wrap ErrInvalid.
func Normalize(a Algorithm, l Limit) (Limit, error) {
	if !a.valid() {
		return Limit{}, fmt.Errorf("%w: unknown algorithm %d", ErrInvalid, int(a))
	}
	maxRate := MaxRate
	if a == SlidingLog {
		maxRate = MaxLogRate
	}
	if l.Rate < 1 || l.Rate > maxRate {
		return Limit{}, fmt.Errorf("%w: rate %d out of range [1, %d] for %v", ErrInvalid, l.Rate, maxRate, a)
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return Limit{}, fmt.Errorf("%w: period %v out of range [%v, %v]", ErrInvalid, l.Period, MinPeriod, MaxPeriod)
	}
	if l.Period%time.Microsecond != 0 {
		return Limit{}, fmt.Errorf("%w: period %v is not a whole number of microseconds", ErrInvalid, l.Period)
	}
	if l.Burst < 0 {
		return Limit{}, fmt.Errorf("%w: negative burst %d", ErrInvalid, l.Burst)
	}
	if a != GCRA && l.Burst != 0 && l.Burst != l.Rate {
		return Limit{}, fmt.Errorf("%w: burst %d given for %v, which has no burst (leave it 0)", ErrInvalid, l.Burst, a)
	}
	if l.Burst > MaxRate {
		return Limit{}, fmt.Errorf("%w: burst %d above %d", ErrInvalid, l.Burst, MaxRate)
	}
	if l.Name == "" {
		l.Name = l.defaultName()
	}
	if err := ValidateName("limit name", l.Name); err != nil {
		return Limit{}, err
	}
	if l.Burst == 0 {
		l.Burst = l.Rate
	}
	if a == GCRA && !refillWithin(l) {
		return Limit{}, fmt.Errorf("%w: a bucket of %d refilling %d per %v takes longer than %v to refill", ErrInvalid, l.Burst, l.Rate, l.Period, MaxPeriod)
	}
	return l, nil
}

// refillWithin reports whether a GCRA bucket of l refills within MaxPeriod:
// Period*Burst/Rate <= MaxPeriod, compared exactly as Burst*Period_us <=
// MaxPeriod_us*Rate.
func refillWithin(l Limit) bool {
	p := uint64(l.Period / time.Microsecond)
	hi1, lo1 := bits.Mul64(uint64(l.Burst), p)
	hi2, lo2 := bits.Mul64(uint64(MaxPeriod/time.Microsecond), uint64(l.Rate))
	return hi1 < hi2 || (hi1 == hi2 && lo1 <= lo2)
}

// ValidateName checks a limit or group name (what names it in the error):
// 1 to MaxNameLen bytes of letters, digits, '.', '_' and '-'. Errors wrap
// ErrInvalid.
func ValidateName(what, name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s must be 1 to %d bytes", ErrInvalid, what, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: %s %q: only letters, digits, '.', '_' and '-' are allowed", ErrInvalid, what, name)
		}
	}
	return nil
}

// ValidateKey checks a key: 1 to MaxKeyLen bytes of valid UTF-8 without
// NUL. Errors wrap ErrInvalid.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: key contains NUL", ErrInvalid)
	}
	return nil
}

// MarshalJSON writes the limit with its period as a duration string:
// {"name":"api","rate":100,"period":"1m0s","burst":20}.
func (l Limit) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name   string `json:"name"`
		Rate   int    `json:"rate"`
		Period string `json:"period"`
		Burst  int    `json:"burst,omitempty"`
	}{l.Name, l.Rate, l.Period.String(), l.Burst})
}

// MarshalText writes the algorithm's name ("gcra", "fixed-window", …).
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON reads the form MarshalJSON writes; the period may also be
// a number of nanoseconds. The limit is not validated here: New does that.
func (l *Limit) UnmarshalJSON(b []byte) error {
	var v struct {
		Name   string          `json:"name"`
		Rate   int             `json:"rate"`
		Period json.RawMessage `json:"period"`
		Burst  int             `json:"burst"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var p time.Duration
	if len(v.Period) > 0 && v.Period[0] == '"' {
		var s string
		if err := json.Unmarshal(v.Period, &s); err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%w: period %q: %v", ErrInvalid, s, err)
		}
		p = d
	} else if len(v.Period) > 0 {
		if err := json.Unmarshal(v.Period, &p); err != nil {
			return fmt.Errorf("%w: period: %v", ErrInvalid, err)
		}
	}
	*l = Limit{Name: v.Name, Rate: v.Rate, Period: p, Burst: v.Burst}
	return nil
}

// UnmarshalText reads an algorithm's name as String writes it.
func (a *Algorithm) UnmarshalText(b []byte) error {
	for x := GCRA; x <= SlidingWindow; x++ {
		if x.String() == string(b) {
			*a = x
			return nil
		}
	}
	return fmt.Errorf("%w: unknown algorithm %q", ErrInvalid, b)
}
