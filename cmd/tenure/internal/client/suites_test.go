package client_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// TestIdempotencyConformanceSQLite runs the idempotency suite (the
// transactional cases belong to the SQL stores' own form and do not apply
// over HTTP) against serve on SQLite; every extra client has its own
// connections.
func TestIdempotencyConformanceSQLite(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target {
		s := startSQLite(t, "", nil)
		f := &faults{}
		return idempotencytest.Target{
			Store:     newClient(t, s.url, f).Idempotency(),
			Direct:    newClient(t, s.url, nil).Idempotency(),
			NewClient: func(t *testing.T) idempotency.Store { return newClient(t, s.url, nil).Idempotency() },
			Faults:    f,
			Unit:      claimUnit,
		}
	})
}

// TestRateLimitConformanceSQLite runs the rate limit suite against serve
// on SQLite, with the store's clock driven by the suite.
func TestRateLimitConformanceSQLite(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
		s := startSQLite(t, "", &sqlitestore.Options{Clock: clock.Now})
		f := &faults{}
		return ratelimittest.Target{
			Store:  newClient(t, s.url, f).Limits(),
			Clock:  clock,
			Faults: f,
			Keys: func(ctx context.Context) ([]ratelimittest.KeyTTL, error) {
				rows, err := s.store.DB().QueryContext(ctx, `SELECT "key", expires_us - ?1 FROM tenure_ratelimit WHERE expires_us > ?1`, clock.Now().UnixMicro())
				if err != nil {
					return nil, err
				}
				defer rows.Close()
				var ks []ratelimittest.KeyTTL
				for rows.Next() {
					var (
						k    string
						left int64
					)
					if err := rows.Scan(&k, &left); err != nil {
						return nil, err
					}
					ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: time.Duration(left) * time.Microsecond})
				}
				return ks, rows.Err()
			},
			Poison: func(ctx context.Context, key driver.StateKey) error {
				_, err := s.store.DB().ExecContext(ctx, `INSERT INTO `+"tenure_ratelimit"+` ("key", state, expires_us) VALUES (?1, ?2, ?3)
					ON CONFLICT ("key") DO UPDATE SET state = excluded.state, expires_us = excluded.expires_us`,
					key.String(), []byte("not a state"), clock.Now().Add(time.Minute).UnixMicro())
				return err
			},
			NoBubble: "the store is reached over HTTP, from outside a testing/synctest bubble",
		}
	})
}

// sessionClock is the store's clock for the session suite.
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

// TestSessionConformanceSQLite runs the session suite against serve on
// SQLite with a fake store clock.
func TestSessionConformanceSQLite(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		clock := &sessionClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		s := startSQLite(t, "", &sqlitestore.Options{Clock: clock.Now})
		f := &faults{}
		db := s.store.DB()
		return sessiontest.Target{
			Store:   newClient(t, s.url, f).Sessions(),
			Direct:  newClient(t, s.url, nil).Sessions(),
			Faults:  f,
			Advance: clock.Advance,
			Commit:  sessionCommitter{hc: &http.Client{Transport: f}, url: s.url, read: sqlValue(db, "tenure_session_values")},
			Present: func(t *testing.T, id session.ID) bool {
				var n int
				if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM tenure_sessions WHERE id = ?`, string(id)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			},
			Dump: func(t *testing.T) string {
				rows, err := db.QueryContext(t.Context(), `SELECT id, user_id, data FROM tenure_sessions`)
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
				return b.String()
			},
		}
	})
}
