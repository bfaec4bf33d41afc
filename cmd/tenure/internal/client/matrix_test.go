package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/pgstore"
)

// pgServeSchema is tenure serve over the tables of one schema of a
// PostgreSQL database (already migrated), with a pool of its own; it
// serves no fenced values.
func pgServeSchema(t testing.TB, dsn, schema string) string {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newPG(t, pool, &pgstore.Options{Schema: schema})
	u, _ := serve(t, server.Stores{Leases: s.Leases(), Idempotency: s.Idempotency(), Limits: s.Limits(),
		Sessions: s.Sessions(), Schedules: s.Schedules()}, nil)
	return u
}

var pgSchemaSeq atomic.Int64

// TestRateLimitConformancePostgres runs the rate limit suite against serve
// on PostgreSQL (the store's real clock): one database, a schema of its
// own per case, the rows read directly from the database.
func TestRateLimitConformancePostgres(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	dsn := srv.NewDatabase(t)
	direct := pgxPool(t, dsn)
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		schema := fmt.Sprintf("serve_rl_%d", pgSchemaSeq.Add(1))
		if err := newPG(t, direct, &pgstore.Options{Schema: schema}).Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		f := &faults{}
		return ratelimittest.Target{
			Store:  newClient(t, pgServeSchema(t, dsn, schema), f).Limits(),
			Faults: f,
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
			NoBubble: "the store is reached over HTTP, from outside a testing/synctest bubble",
		}
	})
}

// redisPrefix returns a key prefix no other test on the shared Redis
// server uses.
func redisPrefix(kind string) string {
	return fmt.Sprintf("serve-%s:%d:%d:", kind, time.Now().UnixNano(), prefixSeq.Add(1))
}

// redisRateKeys lists every key under prefix with its PTTL (-1: no
// expiry).
func redisRateKeys(ctx context.Context, c rueidis.Client, prefix string) ([]ratelimittest.KeyTTL, error) {
	var out []ratelimittest.KeyTTL
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, k := range e.Elements {
			ms, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				return nil, err
			}
			if ms == -2 {
				continue // expired meanwhile
			}
			out = append(out, ratelimittest.KeyTTL{Key: k, TTL: time.Duration(ms) * time.Millisecond})
		}
		if cursor = e.Cursor; cursor == 0 {
			return out, nil
		}
	}
}

// redisRateKey is the Redis key of a rate limit state key (the names the
// suite poisons hold no '%', '{' or '}', which the store escapes).
func redisRateKey(prefix string, k driver.StateKey) string {
	if k.Group == "" {
		return prefix + "rl{" + k.Key + "}:" + k.Kind + ":" + k.Name
	}
	return prefix + "rl{*" + k.Group + "}:" + k.Kind + ":" + k.Name + ":" + k.Key
}

// TestRateLimitConformanceRedis runs the rate limit suite against serve on
// Redis (the store's real clock), a prefix of its own per case, the keys
// read directly from the server.
func TestRateLimitConformanceRedis(t *testing.T) {
	r := testenv.SharedRedis(t)
	direct := redisClient(t, r.Addr())
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		prefix := redisPrefix("rl")
		u, _, _ := redisServe(t, r.Addr(), prefix)
		f := &faults{}
		return ratelimittest.Target{
			Store:  newClient(t, u, f).Limits(),
			Faults: f,
			Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
				return redisRateKeys(ctx, direct, prefix)
			},
			Poison: func(ctx context.Context, key driver.StateKey) error {
				k := redisRateKey(prefix, key)
				if strings.ContainsAny(key.Group+key.Key, "%{}") {
					return fmt.Errorf("state key %v needs escaping", key)
				}
				return direct.Do(ctx, direct.B().Set().Key(k).Value("not a state").Px(time.Minute).Build()).Error()
			},
			NoBubble: "the store is reached over HTTP, from outside a testing/synctest bubble",
		}
	})
}

// TestSessionConformancePostgres runs the session suite against serve on
// PostgreSQL (the store's real clock): one database for the whole suite
// (each case uses users of its own), the store and the independent view
// on instances of their own.
func TestSessionConformancePostgres(t *testing.T) {
	dsn := pgDatabase(t)
	direct := pgxPool(t, dsn)
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		a, _, _ := pgServe(t, dsn)
		b, _, _ := pgServe(t, dsn)
		f := &faults{}
		return sessiontest.Target{
			Store:  newClient(t, a, f).Sessions(),
			Direct: newClient(t, b, nil).Sessions(),
			Faults: f,
			Unit:   claimUnit,
			Commit: sessionCommitter{hc: &http.Client{Transport: f}, url: a, read: func(ctx context.Context, userID, name string) ([]byte, bool, error) {
				var v []byte
				err := direct.QueryRow(ctx, `SELECT value FROM tenure.tenure_session_values WHERE user_id = $1 AND name = $2`, userID, name).Scan(&v)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil, false, nil
				}
				return v, err == nil, err
			}},
			Present: func(t *testing.T, id session.ID) bool {
				var n int
				if err := direct.QueryRow(t.Context(), `SELECT count(*) FROM tenure.sessions WHERE id = $1`, string(id)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			},
			Dump: func(t *testing.T) string {
				rows, err := direct.Query(t.Context(), `SELECT id, user_id, encode(data, 'escape') FROM tenure.sessions`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var b strings.Builder
				for rows.Next() {
					var id, user, data string
					if err := rows.Scan(&id, &user, &data); err != nil {
						t.Fatal(err)
					}
					b.WriteString(id + " " + user + " " + data + "\n")
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return b.String()
			},
		}
	})
}

// TestIdempotencyConformanceRedis runs the idempotency suite against serve
// on Redis, a prefix of its own per case, each extra client on an instance
// of its own.
func TestIdempotencyConformanceRedis(t *testing.T) {
	r := testenv.SharedRedis(t)
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target {
		prefix := redisPrefix("idem")
		a, _, _ := redisServe(t, r.Addr(), prefix)
		f := &faults{}
		return idempotencytest.Target{
			Store:  newClient(t, a, f).Idempotency(),
			Direct: newClient(t, a, nil).Idempotency(),
			NewClient: func(t *testing.T) idempotency.Store {
				u, _, _ := redisServe(t, r.Addr(), prefix)
				return newClient(t, u, nil).Idempotency()
			},
			Faults: f,
			Unit:   claimUnit,
		}
	})
}
