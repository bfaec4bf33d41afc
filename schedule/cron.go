package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule produces a job's slots: the nominal instants at which it fires.
// Every node computes the same slots and the same IDs from the same
// schedule, so a slot's ID is stable across nodes and restarts.
type Schedule interface {
	// Next returns the first slot strictly after t, or the zero Time if
	// there is none.
	Next(t time.Time) time.Time
	// ID returns the stable ID of the slot at t (a time Next returned):
	// 1 to MaxIDLen bytes of the characters IDs allow (see schedule/driver.ValidateID).
	ID(slot time.Time) string
	// String describes the schedule.
	String() string
}

// parser is robfig/cron's parser: five fields (minute, hour, day of month,
// month, day of week) with an optional leading seconds field, and the
// descriptors @yearly, @monthly, @weekly, @daily, @hourly.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor)

// starBit is robfig/cron's marker of a field written as "*".
const starBit = 1 << 63

// allHours has a bit for each of the 24 hours.
const allHours = 1<<24 - 1

// maxSearch bounds how far Next looks ahead for a spec that matches rarely
// or never (February 30).
const maxSearch = 5 * 366 * 24 * time.Hour

// Cron returns the schedule of a cron spec in location loc (nil means UTC).
// The spec is parsed by robfig/cron's parser: five fields (minute, hour,
// day of month, month, day of week), an optional leading seconds field, or
// a descriptor (@yearly, @monthly, @weekly, @daily, @hourly). Time zones go
// in loc, not in the spec: a TZ= or CRON_TZ= prefix is refused, and so is
// @every (use [Every]).
//
// On top of the parser, Cron applies its own daylight-saving policy, the
// same on every node:
//
//   - A fixed-hour spec (its hour field does not cover all 24 hours, as in
//     "30 2 * * *" or "0 9,17 * * 1-5") fires once per wall-clock date-time
//     it matches. When that local time occurs twice (the clocks go back),
//     it fires at the first occurrence only. When it does not occur (the
//     clocks go forward over it), it fires at the end of the gap, the first
//     instant after the jump (02:30 on a day New York skips 02:00–03:00
//     fires at 03:00 EDT).
//   - A wildcard-hour spec (hour field "*", as in "0 * * * *" or
//     "*/5 * * * *") fires at every instant whose local time matches: twice
//     in a repeated hour, never in a skipped one.
//
// Several wall-clock times that fall into one gap fire once, at its end: a
// slot is an instant, and no two slots share one. A slot's ID is its
// instant in loc with the UTC offset (2026-11-01T01:30:00-04:00), so the
// two occurrences of a repeated time have distinct IDs.
func Cron(spec string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	trimmed := strings.TrimSpace(spec)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, fmt.Errorf("%w: cron spec %q: give the time zone as the location, not in the spec", ErrInvalid, spec)
	}
	if strings.HasPrefix(trimmed, "@every") {
		return nil, fmt.Errorf("%w: cron spec %q: use schedule.Every for fixed intervals", ErrInvalid, spec)
	}
	parsed, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: cron spec %q: %w", ErrInvalid, spec, err)
	}
	ss, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%w: cron spec %q: unsupported form", ErrInvalid, spec)
	}
	c := &cronSchedule{spec: trimmed, loc: loc, s: *ss}
	c.wildHour = ss.Hour&starBit != 0 || ss.Hour&allHours == allHours
	return c, nil
}

type cronSchedule struct {
	spec     string
	loc      *time.Location
	s        cron.SpecSchedule
	wildHour bool
}

func (c *cronSchedule) String() string {
	return fmt.Sprintf("cron %q in %s", c.spec, c.loc)
}

// ID formats the slot in the schedule's location with its UTC offset.
func (c *cronSchedule) ID(slot time.Time) string {
	return slot.In(c.loc).Format("2006-01-02T15:04:05-07:00")
}

// civil is a wall-clock date-time.
type civil struct {
	y             int
	mo            time.Month
	d, h, mi, sec int
}

func civilOf(t time.Time) civil {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return civil{y, mo, d, h, mi, s}
}

// naive is the civil time read as if it were UTC, in Unix seconds: a
// total order on wall-clock times.
func (c civil) naive() int64 {
	return time.Date(c.y, c.mo, c.d, c.h, c.mi, c.sec, 0, time.UTC).Unix()
}

// Next enumerates wall-clock date-times that match the spec in ascending
// order, maps each to its instants under the DST policy, and returns the
// earliest instant after t. It starts three hours of wall-clock time
// before t (an earlier wall-clock time can be a later instant after the
// clocks went back) and stops three hours of wall-clock time after the
// best instant found (no offset change is that large).
func (c *cronSchedule) Next(t time.Time) time.Time {
	const slack = 3 * 3600
	startCivil := civilOf(t.Add(-slack * time.Second).In(c.loc))
	start := startCivil.naive()
	limit := start + int64(maxSearch/time.Second)
	var best time.Time
	bestNaive := int64(0)
	day := time.Date(startCivil.y, startCivil.mo, startCivil.d, 0, 0, 0, 0, time.UTC)
	for ; day.Unix() <= limit; day = day.AddDate(0, 0, 1) {
		if !best.IsZero() && day.Unix() > bestNaive+slack {
			break
		}
		if !c.dayMatches(day) {
			continue
		}
		dayStart := day.Unix()
		if dayStart+86399 < start {
			continue
		}
		for h := 0; h < 24; h++ {
			if c.s.Hour&(1<<uint(h)) == 0 || dayStart+int64(h)*3600+3599 < start {
				continue
			}
			for mi := 0; mi < 60; mi++ {
				if c.s.Minute&(1<<uint(mi)) == 0 {
					continue
				}
				base := dayStart + int64(h)*3600 + int64(mi)*60
				if base+59 < start {
					continue
				}
				for sec := 0; sec < 60; sec++ {
					if c.s.Second&(1<<uint(sec)) == 0 {
						continue
					}
					n := base + int64(sec)
					if n < start {
						continue
					}
					if !best.IsZero() && n > bestNaive+slack {
						return best
					}
					cv := civil{day.Year(), day.Month(), day.Day(), h, mi, sec}
					for _, i := range c.instants(cv, n) {
						if i.After(t) && (best.IsZero() || i.Before(best)) {
							best = i
							bestNaive = civilOf(i).naive()
						}
					}
				}
			}
		}
	}
	return best
}

func (c *cronSchedule) dayMatches(day time.Time) bool {
	if c.s.Month&(1<<uint(day.Month())) == 0 {
		return false
	}
	domMatch := c.s.Dom&(1<<uint(day.Day())) != 0
	dowMatch := c.s.Dow&(1<<uint(day.Weekday())) != 0
	if c.s.Dom&starBit != 0 || c.s.Dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// instants returns the instants at which wall-clock time cv (naive n)
// fires under the DST policy, ascending.
func (c *cronSchedule) instants(cv civil, n int64) []time.Time {
	before := offsetAt(c.loc, n-86400)
	after := offsetAt(c.loc, n+86400)
	var out []time.Time
	for _, off := range []int64{before, after} {
		i := time.Unix(n-off, 0).In(c.loc)
		if civilOf(i) != cv {
			continue
		}
		if len(out) == 1 && out[0].Equal(i) {
			continue
		}
		out = append(out, i)
	}
	if len(out) == 2 && out[1].Before(out[0]) {
		out[0], out[1] = out[1], out[0]
	}
	switch {
	case len(out) == 2 && !c.wildHour:
		// A repeated local time: a fixed-hour spec fires at the first
		// occurrence only.
		return out[:1]
	case len(out) == 0 && !c.wildHour:
		// A skipped local time: fire at the end of the gap. Read with the
		// offset in force before the jump, cv names an instant after the
		// transition; its zone starts at the transition.
		i := time.Unix(n-min(before, after), 0).In(c.loc)
		start, _ := i.ZoneBounds()
		if start.IsZero() {
			return nil
		}
		return []time.Time{start.In(c.loc)}
	}
	return out
}

// offsetAt returns loc's UTC offset in seconds at Unix time u.
func offsetAt(loc *time.Location, u int64) int64 {
	_, off := time.Unix(u, 0).In(loc).Zone()
	return int64(off)
}

// Every returns a fixed-interval schedule: slots at every whole multiple of
// d since the Unix epoch (UTC), so that every node computes the same slots
// whenever it started. d must be a whole number of milliseconds, at least
// one; [Scheduler.Add] refuses other values. A slot's ID is its instant in
// UTC (RFC 3339 with fractional seconds where needed).
//
// A fixed interval ignores wall-clock time: Every(24*time.Hour) fires at
// 00:00 UTC, which moves by an hour in local time across a DST change. Use
// Cron for local-time schedules.
func Every(d time.Duration) Schedule { return every{d} }

type every struct{ d time.Duration }

func (e every) valid() error {
	if e.d < time.Millisecond || e.d%time.Millisecond != 0 {
		return fmt.Errorf("%w: interval %v must be a whole number of milliseconds, at least 1ms", ErrInvalid, e.d)
	}
	return nil
}

func (e every) Next(t time.Time) time.Time {
	if e.valid() != nil {
		return time.Time{}
	}
	ms := t.UnixMilli()
	if t.Before(time.UnixMilli(ms)) { // negative times round towards zero
		ms--
	}
	d := e.d.Milliseconds()
	k := ms / d
	if ms < 0 && ms%d != 0 {
		k--
	}
	return time.UnixMilli((k + 1) * d).UTC()
}

func (e every) ID(slot time.Time) string { return slot.UTC().Format(time.RFC3339Nano) }

func (e every) String() string { return "every " + e.d.String() }
