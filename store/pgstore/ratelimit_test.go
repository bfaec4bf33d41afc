package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/pgstore"
)

// warmRate prepares the rate limit statements on every connection of pool
// (see poolVia: a cold connection would not send a request while the proxy
// drops replies).
func warmRate(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store) {
	t.Helper()
	ctx := ctxT(t)
	conns := make([]*pgxpool.Conn, pool.Config().MaxConns)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		for _, sql := range pgstore.RateStatements(db) {
			if _, err := c.Conn().Prepare(ctx, sql, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range conns {
		c.Release()
	}
}

var rateSchemaSeq int

// TestRateLimitSweep: expired rows are deleted by SweepLimits; live rows
// stay, and a row past its expiry already counts as absent before that.
func TestRateLimitSweep(t *testing.T) {
	ctx := ctxT(t)
	_, db := fresh(t, nil)
	short, _ := ratelimit.New(db.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "short", Rate: 1, Period: 50 * time.Millisecond}, nil)
	long, _ := ratelimit.New(db.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "long", Rate: 1, Period: time.Hour}, nil)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := short.Allow(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := long.Allow(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for {
		d, err := short.Peek(ctx, "c", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	n, err := db.SweepLimits(ctx)
	if err != nil || n != 3 {
		t.Fatalf("SweepLimits = %d, %v; want 3", n, err)
	}
	if d, err := long.Peek(ctx, "a", 1); err != nil || d.Allowed {
		t.Fatalf("a live row was swept: %+v, %v", d, err)
	}
}

// TestRateLimitNotMigrated: without Migrate the error says so; it is not
// "unavailable" and certainly not "allowed".
func TestRateLimitNotMigrated(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	l, _ := ratelimit.New(newPG(t, pool, nil).Limits(), ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Second}, nil)
	d, err := l.Allow(ctxT(t), "k")
	if err == nil || d.Allowed || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Allow before Migrate: %+v, %v", d, err)
	}
}
