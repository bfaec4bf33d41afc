package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
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

// TestRateLimitConformance runs the rate limit suite on the shared server:
// one database, a schema of its own per case, the store behind a TCP proxy.
func TestRateLimitConformance(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	dsn := srv.NewDatabase(t)
	direct := srv.Pool(t, dsn)
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		rateSchemaSeq++
		schema := fmt.Sprintf("rl_%d", rateSchemaSeq)
		o := &pgstore.Options{Schema: schema}
		db := newPG(t, direct, o)
		if err := db.Migrate(ctxT(t)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		proxy := testenv.NewProxy(t, srv.Addr())
		pool := poolVia(t, dsn, proxy.Addr(), db, true)
		s := newPG(t, pool, o)
		warmRate(t, pool, s)
		return ratelimittest.Target{
			Store:  s.Limits(),
			Faults: proxy,
			Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
				rows, err := direct.Query(ctx, `WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
					SELECT key, expires_us - c.now FROM `+schema+`.ratelimits, c WHERE expires_us > c.now
					UNION ALL SELECT key, expires_us - c.now FROM `+schema+`.ratelimit_permits, c WHERE expires_us > c.now`)
				if err != nil {
					return nil, err
				}
				defer rows.Close()
				var ks []ratelimittest.KeyTTL
				for rows.Next() {
					var k string
					var left int64
					if err := rows.Scan(&k, &left); err != nil {
						return nil, err
					}
					ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: time.Duration(left) * time.Microsecond})
				}
				return ks, rows.Err()
			},
			Poison: func(ctx context.Context, key driver.StateKey) error {
				_, err := direct.Exec(ctx, `INSERT INTO `+schema+`.ratelimits (key, alg, a, b, c, expires_us)
					VALUES ($1, 9, 0, 0, 0, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 60000000)`, key.String())
				return err
			},
		}
	})
}

// TestRateLimitSweep: expired rows are deleted by SweepLimits; live rows
// stay, and a row past its expiry already counts as absent before that.
func TestRateLimitSweep(t *testing.T) {
	ctx := ctxT(t)
	_, db := fresh(t, nil)
	short, _ := ratelimit.New(db.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "short", Rate: 1, Period: 50 * time.Millisecond})
	long, _ := ratelimit.New(db.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "long", Rate: 1, Period: time.Hour})
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
	pool := srv.Pool(t, srv.NewDatabase(t))
	l, _ := ratelimit.New(newPG(t, pool, nil).Limits(), ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Second})
	d, err := l.Allow(ctxT(t), "k")
	if err == nil || d.Allowed || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Allow before Migrate: %+v, %v", d, err)
	}
}
