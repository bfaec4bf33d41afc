package proof

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// allSlots is the slot of a fault that stops every worker at once (a
// proxy fault, a store restart or failover).
const allSlots = -1

// downSpan is a span of time in which the nemesis kept one worker slot
// (or, with slot allSlots, every worker) from reaching the store: paused,
// killed until restarted, or its connections held; or the store itself
// disturbed. to is zero while the span is open.
type downSpan struct {
	slot     int
	kind     string // pause, kill, hold (its connections), proxy, store
	from, to time.Time
}

// downtime records the nemesis's spans of downtime, for the checks that
// judge liveness (a new leader within a bound after the old one went
// down), which must not count against the store a time when no worker
// could have taken over.
type downtime struct {
	spans []downSpan
	open  map[int]int // slot to its open span's index
}

// down opens a span of slot at now, unless one is open.
func (d *downtime) down(slot int, kind string) {
	if d.open == nil {
		d.open = map[int]int{}
	}
	if _, ok := d.open[slot]; ok {
		return
	}
	d.open[slot] = len(d.spans)
	d.spans = append(d.spans, downSpan{slot: slot, kind: kind, from: time.Now()})
}

// up closes slot's open span at now, if any.
func (d *downtime) up(slot int) {
	if i, ok := d.open[slot]; ok {
		d.spans[i].to = time.Now()
		delete(d.open, slot)
	}
}

// closed returns the spans, those still open ended at end.
func (d *downtime) closed(end time.Time) []downSpan {
	out := make([]downSpan, len(d.spans))
	copy(out, d.spans)
	for i := range out {
		if out[i].to.IsZero() {
			out[i].to = end
		}
	}
	return out
}

// slotOf is the worker slot of a history client ("w2/a" and "w2.3" are
// slot 1), or -2 when proc names none.
func slotOf(proc string) int {
	name, _, _ := strings.Cut(memberName(proc), ".")
	n, err := strconv.Atoi(strings.TrimPrefix(name, "w"))
	if err != nil || !strings.HasPrefix(name, "w") {
		return -2
	}
	return n - 1
}

// allDown returns how long, within [from, to], every worker slot but
// except was down at once (or a fault stopped every worker), given the
// run's worker count.
func allDown(spans []downSpan, workers, except int, from, to time.Time) time.Duration {
	type iv struct{ a, b time.Time }
	clip := func(s downSpan) (iv, bool) {
		a, b := s.from, s.to
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		return iv{a, b}, a.Before(b)
	}
	// The stretches in which every other slot was down, narrowed slot by
	// slot, then the faults that stopped every worker.
	cur := []iv{{from, to}}
	for slot := range workers {
		if slot == except || len(cur) == 0 {
			continue
		}
		var next []iv
		for _, s := range spans {
			if s.slot != slot {
				continue
			}
			d, ok := clip(s)
			if !ok {
				continue
			}
			for _, c := range cur {
				a, b := c.a, c.b
				if d.a.After(a) {
					a = d.a
				}
				if d.b.Before(b) {
					b = d.b
				}
				if a.Before(b) {
					next = append(next, iv{a, b})
				}
			}
		}
		cur = next
	}
	for _, s := range spans {
		if s.slot == allSlots {
			if d, ok := clip(s); ok {
				cur = append(cur, d)
			}
		}
	}
	slices.SortFunc(cur, func(x, y iv) int { return x.a.Compare(y.a) })
	var sum time.Duration
	var reach time.Time
	for _, c := range cur {
		if c.a.Before(reach) {
			c.a = reach
		}
		if c.a.Before(c.b) {
			sum += c.b.Sub(c.a)
			reach = c.b
		}
	}
	return sum
}
