package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// TestSweepLimits: expired rows are deleted by SweepLimits (and by the
// sweep decisions run now and then); live rows stay.
func TestSweepLimits(t *testing.T) {
	ctx := t.Context()
	clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clock.Now})
	short, _ := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "short", Rate: 1, Period: time.Second}, nil)
	long, _ := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "long", Rate: 1, Period: time.Hour}, nil)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := short.Allow(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := long.Allow(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	count := func() int {
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.RateLimitTable()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 4 {
		t.Fatalf("%d rows before the sweep, want 4 (expired rows wait for it)", n)
	}
	n, err := s.SweepLimits(ctx)
	if err != nil || n != 3 {
		t.Fatalf("SweepLimits = %d, %v; want 3", n, err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows after the sweep, want 1", n)
	}
	// Decisions sweep by themselves every 128 writes.
	for i := range 3 {
		short.Allow(ctx, string(rune('a'+i)))
	}
	clock.Advance(2 * time.Second)
	for i := range 200 {
		if _, err := long.Allow(ctx, "k"+string(rune('A'+i%50))+string(rune('a'+i/50))); err != nil {
			t.Fatal(err)
		}
	}
	var expired int
	s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.RateLimitTable()+` WHERE expires_us <= ?1`, clock.Now().UnixMicro()).Scan(&expired)
	if expired != 0 {
		t.Fatalf("%d expired rows left after 200 writes", expired)
	}
}
