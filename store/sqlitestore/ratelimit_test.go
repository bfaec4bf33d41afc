package sqlitestore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func rateTarget(t *testing.T, s *sqlitestore.Store, clock *ratelimittest.Clock) ratelimittest.Target {
	ls, faults := ratelimittest.Wrap(s.Limits())
	now := time.Now
	if clock != nil {
		now = clock.Now
	}
	return ratelimittest.Target{
		Store:  ls,
		Clock:  clock,
		Faults: faults,
		Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
			m, err := s.RateLimitKeys(ctx)
			var ks []ratelimittest.KeyTTL
			for k, ttl := range m {
				ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: ttl})
			}
			return ks, err
		},
		Poison: func(ctx context.Context, key driver.StateKey) error {
			_, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.RateLimitTable()+` ("key", state, expires_us) VALUES (?1, ?2, ?3)
				ON CONFLICT ("key") DO UPDATE SET state = excluded.state, expires_us = excluded.expires_us`,
				key.String(), []byte("not a state"), now().Add(time.Minute).UnixMicro())
			return err
		},
	}
}

// TestRateLimitConformance runs the rate limit suite on a SQLite file whose
// store clock the suite drives.
func TestRateLimitConformance(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
		s := open(t, tempPath(t), &sqlitestore.Options{Clock: clock.Now})
		return rateTarget(t, s, clock)
	})
}

// TestRateLimitConformanceRealClock runs it again on the real clock, on a
// database the caller opened (deferred transactions: the store takes the
// write lock itself before reading the clock).
func TestRateLimitConformanceRealClock(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		db, err := sql.Open("sqlite", "file:"+tempPath(t)+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := sqlitestore.New(t.Context(), db, &sqlitestore.Options{Migrate: sqlitestore.MigrateApply})
		if err != nil {
			t.Fatal(err)
		}
		tg := rateTarget(t, s, nil)
		tg.NoBubble = "the store's clock is its process's clock: a caller in the same process with a skewed clock skews the store too"
		return tg
	})
}

// TestSweepLimits: expired rows are deleted by SweepLimits (and by the
// sweep decisions run now and then); live rows stay.
func TestSweepLimits(t *testing.T) {
	ctx := t.Context()
	clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clock.Now})
	short, _ := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "short", Rate: 1, Period: time.Second})
	long, _ := ratelimit.New(s.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "long", Rate: 1, Period: time.Hour})
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
