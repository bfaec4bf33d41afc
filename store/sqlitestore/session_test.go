package sqlitestore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/sqlitestore"
	"github.com/tenurekit/tenure/storetest"
)

// Expired rows stay until swept; the sweep removes exactly those.
func TestSweepSessions(t *testing.T) {
	clock := storetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
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
