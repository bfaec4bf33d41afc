package schedule_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/schedule/scheduletest"
)

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ids returns the IDs of the slots of s after from up to to.
func ids(s schedule.Schedule, from, to time.Time) []string {
	var out []string
	for at := s.Next(from); !at.IsZero() && !at.After(to); at = s.Next(at) {
		out = append(out, s.ID(at))
	}
	return out
}

// The suite's DST cases, on the schedule alone: the slots between from and
// to, and the same slots whatever instant Next starts from (a node that
// restarts mid-transition computes the same IDs).
func TestCronDST(t *testing.T) {
	for _, c := range scheduletest.DSTCases() {
		zone, spec, want := c[0].(string), c[1].(string), c[4].([]string)
		t.Run(zone+" "+spec, func(t *testing.T) {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			s, err := schedule.Cron(spec, loc)
			if err != nil {
				t.Fatal(err)
			}
			from, to := mustParse(t, c[2].(string)), mustParse(t, c[3].(string))
			got := ids(s, from, to)
			if !slices.Equal(got, want) {
				t.Fatalf("slots %v\nwant  %v", got, want)
			}
			for start := from; start.Before(to); start = start.Add(7 * time.Minute) {
				var rest []string
				for _, id := range want {
					if mustParse(t, id).After(start) {
						rest = append(rest, id)
					}
				}
				if got := ids(s, start, to); !slices.Equal(got, rest) {
					t.Fatalf("from %v: slots %v, want %v", start, got, rest)
				}
			}
		})
	}
}

func TestCronMidnightThatDoesNotExist(t *testing.T) {
	// São Paulo skipped from 2018-11-04 00:00 to 01:00.
	loc, err := time.LoadLocation("America/Sao_Paulo")
	if err != nil {
		t.Fatal(err)
	}
	daily, _ := schedule.Cron("0 0 * * *", loc)
	got := ids(daily, mustParse(t, "2018-11-02T12:00:00-03:00"), mustParse(t, "2018-11-05T12:00:00-02:00"))
	want := []string{"2018-11-03T00:00:00-03:00", "2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"}
	if !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	// Two wall-clock times in one gap fire once, at its end.
	two, _ := schedule.Cron("0,30 0 * * *", loc)
	got = ids(two, mustParse(t, "2018-11-03T12:00:00-03:00"), mustParse(t, "2018-11-04T12:00:00-02:00"))
	if want := []string{"2018-11-04T01:00:00-02:00"}; !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
}

func TestCronBasics(t *testing.T) {
	s, err := schedule.Cron("*/15 9-10 * * mon-fri", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := ids(s, mustParse(t, "2026-01-02T10:40:00Z"), mustParse(t, "2026-01-05T09:20:00Z"))
	want := []string{"2026-01-02T10:45:00+00:00", "2026-01-05T09:00:00+00:00", "2026-01-05T09:15:00+00:00"}
	if !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	sec, _ := schedule.Cron("*/20 * * * * *", time.UTC)
	if got := ids(sec, mustParse(t, "2026-01-01T00:00:00Z"), mustParse(t, "2026-01-01T00:01:00Z")); len(got) != 3 {
		t.Fatalf("seconds spec: %v", got)
	}
	never, _ := schedule.Cron("0 0 30 2 *", time.UTC)
	if at := never.Next(time.Now()); !at.IsZero() {
		t.Fatalf("February 30 fires at %v", at)
	}
	for _, bad := range []string{"", "61 * * * *", "TZ=UTC 0 * * * *", "CRON_TZ=UTC 0 * * * *", "@every 1m", "a b c"} {
		if _, err := schedule.Cron(bad, nil); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("Cron(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestEvery(t *testing.T) {
	e := schedule.Every(50 * time.Millisecond)
	at := e.Next(mustParse(t, "2026-01-01T00:00:00Z").Add(20 * time.Millisecond))
	if want := mustParse(t, "2026-01-01T00:00:00Z").Add(50 * time.Millisecond); !at.Equal(want) {
		t.Fatalf("Next = %v, want %v", at, want)
	}
	if id := e.ID(at); id != "2026-01-01T00:00:00.05Z" {
		t.Fatalf("ID = %q", id)
	}
	if next := e.Next(at); !next.Equal(at.Add(50 * time.Millisecond)) {
		t.Fatalf("Next(slot) = %v", next)
	}
	if err := scheddriver.ValidateID(e.ID(at)); err != nil {
		t.Fatal(err)
	}
}
