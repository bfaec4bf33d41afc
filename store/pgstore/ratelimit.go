package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// The rate limit tables and the PL/pgSQL functions that run the
// algorithms (ratelimit_eval, ratelimit_decide, ratelimit_permit) are
// created by the migration files (migrations/0001_initial.up.sql). The
// arithmetic of ratelimit_eval is driver.Evaluate's, step for step; the
// conformance suite checks them against each other.

// rateSweepEvery is how many decisions pass between two sweeps of expired
// rows (each sweep deletes up to 200 rows of each table).
const rateSweepEvery = 128

type rateQueries struct {
	decide, permit, reset, ttl string
}

// Limits returns the store's ratelimit.Store view. Every call is one
// statement (one round trip): a PL/pgSQL function (created by Migrate) that
// takes the key's advisory lock (xact-scoped, in a consistent order for
// groups; shared for peeks), reads clock_timestamp() once, and runs the
// algorithms of driver.Evaluate. State lives in the ratelimits and
// ratelimit_permits tables with an expires_us column (µs since the epoch):
// a row past it counts as absent; decisions delete up to 200 expired rows
// every 128 calls, and SweepLimits deletes them on demand.
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		sch := pgx.Identifier{s.schema}.Sanitize()
		l := &rateLimits{s: s, q: rateQueries{
			// Arrays travel as text (see pgArray), so that every driver
			// sends and reads them alike.
			decide: `SELECT ` + sch + `.ratelimit_decide($1::text::text[], $2::text::int[], $3::text::bigint[], $4::text::bigint[], $5::text::bigint[], $6::text::bigint[], $7, $8)::text`,
			permit: `SELECT ` + sch + `.ratelimit_permit($1, $2, $3, $4::int, $5::bigint)::text`,
			reset:  `DELETE FROM ` + sch + `.ratelimits WHERE key = ANY($1::text::text[])`,
			ttl: `SELECT expires_us - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM ` + sch + `.ratelimits
WHERE key = $1`,
		}}
		l.PermitOps = driver.PermitOps{Op: l.permit}
		return l
	}).(*rateLimits)
}

// SweepLimits deletes the rate limit and permit rows that expired and
// returns how many it deleted.
func (s *Store) SweepLimits(ctx context.Context) (int64, error) {
	sch := pgx.Identifier{s.schema}.Sanitize()
	var n int64
	for _, t := range []string{"ratelimits", "ratelimit_permits"} {
		k, err := s.db.exec(ctx, `DELETE FROM `+sch+`.`+t+` WHERE expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`)
		if err != nil {
			return n, rateErr(s.wrap(ctx, "sweep rate limits", err))
		}
		n += k
	}
	return n, nil
}

type rateLimits struct {
	s *Store
	// PermitOps gives AcquirePermit, RenewPermit and ReleasePermit
	// from permit.
	driver.PermitOps
	q     rateQueries
	calls atomic.Int64
}

// rateErr adds ratelimit.ErrUnavailable to an error that wraps
// lease.ErrUnavailable.
func rateErr(err error) error {
	if errors.Is(err, lease.ErrUnavailable) {
		return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	}
	if errors.Is(err, lease.ErrInvalid) {
		return fmt.Errorf("%w: %w", ratelimit.ErrInvalid, err)
	}
	return err
}

// check reports a bad Options.Schema (keys are valid UTF-8 without NUL
// and permit ids visible ASCII already, as PostgreSQL text needs).
func (l *rateLimits) check() error {
	return nil
}

func (l *rateLimits) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := driver.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	n := len(reqs)
	keys := make([]string, n)
	algs := make([]int32, n)
	rates, periods, bursts, costs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range reqs {
		keys[i] = r.Key.String()
		algs[i] = int32(r.Algorithm)
		rates[i] = int64(r.Limit.Rate)
		periods[i] = int64(r.Limit.Period / time.Microsecond)
		bursts[i] = int64(r.Limit.Burst)
		costs[i] = int64(r.N)
	}
	sweep := commit && l.calls.Add(1)%rateSweepEvery == 0
	var text string
	err := l.s.db.queryRow(ctx, l.q.decide, []any{pgArray(keys), pgArray(algs), pgArray(rates), pgArray(periods),
		pgArray(bursts), pgArray(costs), commit, sweep}, &text)
	if err != nil {
		return nil, rateErr(l.s.wrap(ctx, fmt.Sprintf("rate limit %q", keys[0]), err))
	}
	out, err := parseInt64s(text)
	if err != nil {
		return nil, fmt.Errorf("pgstore: rate limit %q: %w", keys[0], err)
	}
	if len(out) != 1+4*n {
		return nil, fmt.Errorf("pgstore: rate limit %q: unexpected reply of %d values", keys[0], len(out))
	}
	at := time.UnixMicro(out[0])
	ds := make([]ratelimit.Decision, n)
	for i, r := range reqs {
		v := out[1+4*i:]
		ds[i] = ratelimit.Decision{
			Allowed:    v[0] == 1,
			Remaining:  int(v[1]),
			RetryAfter: time.Duration(v[2]) * time.Microsecond,
			ResetAfter: time.Duration(v[3]) * time.Microsecond,
			Limit:      r.Limit,
			Algorithm:  r.Algorithm,
			At:         at,
		}
	}
	return ds, nil
}

func (l *rateLimits) Reset(ctx context.Context, keys []driver.StateKey) error {
	if err := driver.ValidateStateKeys(keys); err != nil {
		return err
	}
	if err := l.check(); err != nil {
		return err
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = k.String()
	}
	if _, err := l.s.db.exec(ctx, l.q.reset, pgArray(ks)); err != nil {
		return rateErr(l.s.wrap(ctx, fmt.Sprintf("reset rate limit %q", ks[0]), err))
	}
	return nil
}

func (l *rateLimits) permit(ctx context.Context, op string, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, bool, error) {
	if err := l.check(); err != nil {
		return driver.PermitGrant{}, false, err
	}
	var text string
	err := l.s.db.queryRow(ctx, l.q.permit, []any{key.String(), op, id, int32(permits), int64(ttl / time.Microsecond)}, &text)
	if err != nil {
		return driver.PermitGrant{}, false, rateErr(l.s.wrap(ctx, fmt.Sprintf("permit %q", key.String()), err))
	}
	v, err := parseInt64s(text)
	if err != nil {
		return driver.PermitGrant{}, false, fmt.Errorf("pgstore: permit %q: %w", key.String(), err)
	}
	if len(v) != 5 {
		return driver.PermitGrant{}, false, fmt.Errorf("pgstore: permit %q: unexpected reply", key.String())
	}
	g := driver.PermitGrant{
		Acquired:   v[0] == 1,
		Fence:      uint64(v[1]),
		InUse:      int(v[2]),
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		At:         time.UnixMicro(v[4]),
	}
	if g.Acquired && op != "x" {
		g.TTL = ttl
	}
	return g, v[0] == 1, nil
}

// LimitTTL reports whether the store holds live rate limit state under k
// (see ratelimit.Limiter.StateKey) and how long until it expires on the
// server's clock.
func (s *Store) LimitTTL(ctx context.Context, k driver.StateKey) (time.Duration, bool, error) {
	if err := driver.ValidateStateKeys([]driver.StateKey{k}); err != nil {
		return 0, false, err
	}
	l := s.Limits().(*rateLimits)
	if err := l.check(); err != nil {
		return 0, false, err
	}
	var left int64
	err := s.db.queryRow(ctx, l.q.ttl, []any{k.String()}, &left)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, rateErr(s.wrap(ctx, fmt.Sprintf("rate limit ttl %q", k.String()), err))
	case left <= 0:
		return 0, false, nil
	}
	return time.Duration(left) * time.Microsecond, true, nil
}
