package schedule_test

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// fuzzZones are the locations the fuzz targets pick from: UTC, zones with
// DST one hour forward and back (also negative DST in tzdata), a
// 30-minute DST shift, and a half-hour offset without DST.
var fuzzZones = []string{"UTC", "America/New_York", "Europe/Dublin", "Australia/Lord_Howe", "Asia/Kolkata", "America/Sao_Paulo"}

// fuzzStart maps an int64 to an instant between 1971 and 2100.
func fuzzStart(sec int64) time.Time {
	const lo, span = 31536000, 4102444800 - 31536000
	m := sec % span
	if m < 0 {
		m += span
	}
	return time.Unix(lo+m, 0)
}

// FuzzCron: Cron never panics; a spec it refuses is ErrInvalid; a spec it
// accepts yields slots strictly increasing from any start, each with a
// valid ID distinct from the previous one, and Next from just before a
// slot returns that slot.
func FuzzCron(f *testing.F) {
	f.Add("30 2 * * *", int64(1772900000), uint8(1))
	f.Add("0 * * * *", int64(1793500000), uint8(1))
	f.Add("45 1 * * *", int64(1775300000), uint8(3))
	f.Add("*/5 * * * * *", int64(0), uint8(0))
	f.Add("0 0 30 2 *", int64(1000), uint8(0))
	f.Add("@daily", int64(1541300000), uint8(5))
	f.Add("TZ=UTC 0 0 * * *", int64(0), uint8(0))
	f.Add("@every 1h", int64(0), uint8(0))
	f.Add("0 9,17 * * 1-5", int64(1700000000), uint8(2))
	f.Fuzz(func(t *testing.T, spec string, start int64, zone uint8) {
		loc, err := time.LoadLocation(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		s, err := schedule.Cron(spec, loc)
		if err != nil {
			if !errors.Is(err, schedule.ErrInvalid) {
				t.Fatalf("Cron(%q): %v, want ErrInvalid", spec, err)
			}
			return
		}
		at := fuzzStart(start)
		prevID := ""
		for range 8 {
			next := s.Next(at)
			if next.IsZero() {
				return
			}
			if !next.After(at) {
				t.Fatalf("%s: Next(%v) = %v, not after it", s, at, next)
			}
			id := s.ID(next)
			if err := scheddriver.ValidateID(id); err != nil {
				t.Fatalf("%s: ID(%v) = %q: %v", s, next, id, err)
			}
			if id == prevID {
				t.Fatalf("%s: two slots with ID %q", s, id)
			}
			if again := s.Next(next.Add(-time.Nanosecond)); !again.Equal(next) {
				t.Fatalf("%s: Next(%v - 1ns) = %v, want the slot itself", s, next, again)
			}
			prevID, at = id, next
		}
	})
}

// FuzzEvery: a fixed interval is accepted by Add only when it is a whole
// number of milliseconds, at least one; its slots are whole multiples of
// it, strictly increasing, with IDs that name them.
func FuzzEvery(f *testing.F) {
	f.Add(int64(time.Second), int64(1772900000))
	f.Add(int64(time.Millisecond), int64(-5))
	f.Add(int64(1500*time.Microsecond), int64(0))
	f.Add(int64(-time.Second), int64(0))
	f.Add(int64(24*time.Hour), int64(1793500000))
	f.Fuzz(func(t *testing.T, d int64, start int64) {
		iv := time.Duration(d)
		s := schedule.Every(iv)
		ok := iv >= time.Millisecond && iv%time.Millisecond == 0
		sc := newSchedulerForFuzz(t)
		err := sc.Add(schedule.Job{Name: "j", Schedule: s, Run: nopRun})
		if ok != (err == nil) {
			t.Fatalf("Add(Every(%v)) = %v, want accepted %v", iv, err, ok)
		}
		if err != nil && !errors.Is(err, schedule.ErrInvalid) {
			t.Fatalf("Add(Every(%v)) = %v, want ErrInvalid", iv, err)
		}
		if !ok {
			if !s.Next(time.Unix(0, 0)).IsZero() {
				t.Fatalf("Every(%v) has slots", iv)
			}
			return
		}
		at := fuzzStart(start).Add(time.Duration(start%1000) * time.Millisecond)
		for range 4 {
			next := s.Next(at)
			if !next.After(at) || next.Sub(at) > iv || next.UnixMilli()%iv.Milliseconds() != 0 {
				t.Fatalf("Every(%v).Next(%v) = %v", iv, at, next)
			}
			if p, err := time.Parse(time.RFC3339Nano, s.ID(next)); err != nil || !p.Equal(next) {
				t.Fatalf("Every(%v).ID(%v) = %q (%v)", iv, next, s.ID(next), err)
			}
			at = next
		}
	})
}
