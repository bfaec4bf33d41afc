package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// rateSweepEvery is how many rate limit writes pass between two sweeps of
// expired rows; rateSweepBatch is the most rows one sweep deletes.
const (
	rateSweepEvery = 128
	rateSweepBatch = 256
)

type rateQueries struct {
	get, put, del, sweep string
	keys                 string
}

func rateSQL(prefix string) rateQueries {
	r := strings.NewReplacer("$T", `"`+prefix+`ratelimit"`, "$I", `"`+prefix+`ratelimit_expires"`)
	return rateQueries{
		// ?1 key.
		get: r.Replace(`SELECT state, expires_us FROM $T WHERE "key" = ?1`),
		// ?1 key, ?2 state, ?3 expires.
		put: r.Replace(`INSERT INTO $T ("key", state, expires_us) VALUES (?1, ?2, ?3)
			ON CONFLICT ("key") DO UPDATE SET state = excluded.state, expires_us = excluded.expires_us`),
		del: r.Replace(`DELETE FROM $T WHERE "key" = ?1`),
		// ?1 now, ?2 batch.
		sweep: r.Replace(`DELETE FROM $T WHERE "key" IN (SELECT "key" FROM $T WHERE expires_us <= ?1 LIMIT ?2)`),
		// ?1 now.
		keys: r.Replace(`SELECT "key", expires_us - ?1 FROM $T WHERE expires_us > ?1`),
	}
}

// Limits returns the store's ratelimit.Store view. Each decision runs the
// reference algorithms ([driver.Evaluate]) in one write transaction,
// judged on the store's clock read once the transaction holds SQLite's
// write lock (peeks too, so that they are ordered with the writes). State lives in the
// <prefix>ratelimit table; a row past its expiry counts as absent, and
// expired rows are deleted by a sweep that runs every 128 writes (and by
// SweepLimits).
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		return &rateLimits{s: s, q: rateSQL(s.q.prefix)}
	}).(*rateLimits)
}

// SweepLimits deletes the rate limit rows that expired (at most 10000 per
// call) and returns how many it deleted. Decisions sweep by themselves
// now and then; call it to reclaim space after a burst of one-off keys.
func (s *Store) SweepLimits(ctx context.Context) (int64, error) {
	l := s.Limits().(*rateLimits)
	var n int64
	err := l.write(ctx, "sweep", "", func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, l.q.sweep, now, 10_000)
		if err != nil {
			return l.unavailable("sweep", "", err)
		}
		n, err = res.RowsAffected()
		if err != nil {
			return l.unavailable("sweep", "", err)
		}
		return nil
	})
	return n, err
}

type rateLimits struct {
	s      *Store
	q      rateQueries
	writes atomic.Int64
}

// unavailable wraps a database error: both ratelimit.ErrUnavailable and
// lease.ErrUnavailable.
func (l *rateLimits) unavailable(op, key string, err error) error {
	return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, unavailable("ratelimit "+op, key, err))
}

// write runs fn in a write transaction (see Store.writeTx), with the clock
// read after the lock is held, and sweeps expired rows every
// rateSweepEvery writes.
func (l *rateLimits) write(ctx context.Context, op, key string, fn func(tx *sql.Tx, now int64) error) error {
	fail := func(err error) error { return l.unavailable(op, key, err) }
	return l.s.writeTx(ctx, opLane(op), fail, func(tx *sql.Tx, now int64) error {
		if err := fn(tx, now); err != nil {
			return err
		}
		if l.writes.Add(1)%rateSweepEvery == 0 {
			if _, err := tx.ExecContext(ctx, l.q.sweep, now, rateSweepBatch); err != nil {
				return fail(err)
			}
		}
		return nil
	})
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// load reads the live state of key at now (nil when there is none).
func (l *rateLimits) load(ctx context.Context, q querier, key string, now int64) (*driver.State, error) {
	var (
		b   []byte
		exp int64
	)
	err := q.QueryRowContext(ctx, l.q.get, key).Scan(&b, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, l.unavailable("read", key, err)
	}
	if exp <= now {
		return nil, nil
	}
	st := new(driver.State)
	if err := st.UnmarshalBinary(b); err != nil || st.Expires != exp {
		return nil, fmt.Errorf("sqlitestore: the rate limit state of %q is malformed; nothing was written", key)
	}
	return st, nil
}

// store writes st under key, or deletes the row when st is nil.
func (l *rateLimits) store(ctx context.Context, tx *sql.Tx, key string, st *driver.State, now int64) error {
	if st == nil || st.Expires <= now {
		if _, err := tx.ExecContext(ctx, l.q.del, key); err != nil {
			return l.unavailable("write", key, err)
		}
		return nil
	}
	b, _ := st.MarshalBinary()
	if _, err := tx.ExecContext(ctx, l.q.put, key, b, st.Expires); err != nil {
		return l.unavailable("write", key, err)
	}
	return nil
}

func (l *rateLimits) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := driver.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	key0 := reqs[0].Key.String()
	eval := func(q querier, now int64) ([]ratelimit.Decision, []*driver.State, error) {
		states := make([]*driver.State, len(reqs))
		for i, r := range reqs {
			st, err := l.load(ctx, q, r.Key.String(), now)
			if err != nil {
				return nil, nil, err
			}
			states[i] = st
		}
		ds, next := driver.Evaluate(time.UnixMicro(now), reqs, states, commit)
		return ds, next, nil
	}
	// A peek writes nothing, but it too takes the write lock: so that it is
	// ordered with the writers by its clock reading (a peek that read the
	// clock after a writer did also sees that writer's result).
	var ds []ratelimit.Decision
	err := l.write(ctx, "decide", key0, func(tx *sql.Tx, now int64) error {
		d, next, err := eval(tx, now)
		if err != nil {
			return err
		}
		for i, st := range next {
			if err := l.store(ctx, tx, reqs[i].Key.String(), st, now); err != nil {
				return err
			}
		}
		ds = d
		return nil
	})
	return ds, err
}

func (l *rateLimits) Reset(ctx context.Context, keys []driver.StateKey) error {
	if err := driver.ValidateStateKeys(keys); err != nil {
		return err
	}
	return l.write(ctx, "reset", keys[0].String(), func(tx *sql.Tx, now int64) error {
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, l.q.del, k.String()); err != nil {
				return l.unavailable("reset", k.String(), err)
			}
		}
		return nil
	})
}

func (l *rateLimits) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	if err := driver.ValidatePermit(key, id, permits, ttl); err != nil {
		return driver.PermitGrant{}, err
	}
	k := key.String()
	var g driver.PermitGrant
	err := l.write(ctx, "acquire permit", k, func(tx *sql.Tx, now int64) error {
		st, err := l.load(ctx, tx, k, now)
		if err != nil {
			return err
		}
		var next *driver.State
		g, next = driver.EvaluateAcquire(time.UnixMicro(now), st, id, permits, ttl)
		return l.store(ctx, tx, k, next, now)
	})
	return g, err
}

func (l *rateLimits) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (driver.PermitGrant, error) {
	if err := driver.ValidatePermit(key, id, -1, ttl); err != nil {
		return driver.PermitGrant{}, err
	}
	k := key.String()
	var g driver.PermitGrant
	err := l.write(ctx, "renew permit", k, func(tx *sql.Tx, now int64) error {
		st, err := l.load(ctx, tx, k, now)
		if err != nil {
			return err
		}
		var next *driver.State
		g, next, err = driver.EvaluateRenew(time.UnixMicro(now), st, id, ttl)
		if err != nil {
			return err
		}
		return l.store(ctx, tx, k, next, now)
	})
	return g, err
}

func (l *rateLimits) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	if err := driver.ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	k := key.String()
	return l.write(ctx, "release permit", k, func(tx *sql.Tx, now int64) error {
		st, err := l.load(ctx, tx, k, now)
		if err != nil {
			return err
		}
		next, err := driver.EvaluateRelease(time.UnixMicro(now), st, id)
		if err != nil {
			return err
		}
		return l.store(ctx, tx, k, next, now)
	})
}

// rateLimitKeys lists the live rate limit rows with their time left (for
// the tests).
func (l *rateLimits) rateLimitKeys(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := l.s.db.QueryContext(ctx, l.q.keys, l.s.nowUS())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var (
			k    string
			left int64
		)
		if err := rows.Scan(&k, &left); err != nil {
			return nil, err
		}
		out[k] = time.Duration(left) * time.Microsecond
	}
	return out, rows.Err()
}

// LimitTTL reports whether the store holds live rate limit state under k
// (see ratelimit.Limiter.StateKey) and how long until it expires on the
// store's clock.
func (s *Store) LimitTTL(ctx context.Context, k driver.StateKey) (time.Duration, bool, error) {
	if err := driver.ValidateStateKeys([]driver.StateKey{k}); err != nil {
		return 0, false, err
	}
	l := s.Limits().(*rateLimits)
	var (
		b   []byte
		exp int64
	)
	now := s.nowUS()
	err := s.db.QueryRowContext(ctx, l.q.get, k.String()).Scan(&b, &exp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, l.unavailable("read", k.String(), err)
	case exp <= now:
		return 0, false, nil
	}
	return time.Duration(exp-now) * time.Microsecond, true, nil
}
