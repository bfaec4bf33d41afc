package sqlitestore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// sessionClock is the store's clock for the session suite: time passes only
// when the suite advances it.
type sessionClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *sessionClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *sessionClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func sessionTarget(t *testing.T, s *sqlitestore.Store, advance func(time.Duration)) sessiontest.Target {
	wrapped, faults := sessiontest.Wrap(s.Sessions())
	return sessiontest.Target{
		Store:   wrapped,
		Direct:  s.Sessions(),
		Faults:  faults,
		Advance: advance,
		Present: func(t *testing.T, id session.ID) bool {
			var n int
			if err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM tenure_sessions WHERE id = ?`, string(id)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		},
		Dump: func(t *testing.T) string { return dumpSessions(t, s) },
	}
}

func dumpSessions(t *testing.T, s *sqlitestore.Store) string {
	rows, err := s.DB().QueryContext(t.Context(), `SELECT id, user_id, data, version, created_us, idle_us, absolute_us FROM tenure_sessions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, user, data string
		var v, c, i, a int64
		if err := rows.Scan(&id, &user, &data, &v, &c, &i, &a); err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join([]string{id, user, data}, " ") + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSessionConformance runs the suite on a fake store clock.
func TestSessionConformance(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		clock := &sessionClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		s := open(t, tempPath(t), &sqlitestore.Options{Clock: clock.Now})
		return sessionTarget(t, s, clock.Advance)
	})
}

// TestSessionConformanceRealClock runs it on the real clock, with two
// stores on one file (two processes' worth of writers).
func TestSessionConformanceRealClock(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		path := tempPath(t)
		a := open(t, path, nil)
		b := open(t, path, nil)
		tg := sessionTarget(t, a, nil)
		tg.Direct = b.Sessions()
		return tg
	})
}

// Expired rows stay until swept; the sweep removes exactly those.
func TestSweepSessions(t *testing.T) {
	clock := &sessionClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clock.Now})
	ctx := context.Background()
	short, _ := session.New(s.Sessions(), &session.Options{IdleTimeout: time.Second, AbsoluteTimeout: time.Hour})
	longer, _ := session.New(s.Sessions(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour})
	for range 3 {
		if _, _, err := short.Create(ctx, "u1", nil); err != nil {
			t.Fatal(err)
		}
	}
	keep, _, err := longer.Create(ctx, "u2", nil)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if got := strings.Count(dumpSessions(t, s), "\n"); got != 4 {
		t.Fatalf("%d rows before the sweep, want 4 (expired rows stay)", got)
	}
	n, err := s.SweepSessions(ctx)
	if err != nil || n != 3 {
		t.Fatalf("SweepSessions = %d, %v; want 3", n, err)
	}
	if _, err := longer.Load(ctx, keep); err != nil {
		t.Fatalf("the live session after the sweep: %v", err)
	}
}
