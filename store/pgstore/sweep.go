package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/retention"
)

// sweepQueries are the statements of Sweep; each deletes at most $1 rows
// (leases: examines $2 rows after $1) and re-checks, on the row it
// deletes, that it is past its retention, so a row taken or renewed
// meanwhile is kept.
type sweepQueries struct {
	leases, waiters, idempotency, sessions, limits, permits, slots, ledger, hist string
}

func sweepSQL(schema string) sweepQueries {
	q := func(t string) string { return schema + "." + t }
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	// A schedule record is final unless running or failed with a retry
	// pending (schedule/driver.Final).
	const final = `(s.state IN ('done', 'skipped', 'missed') OR (s.state = 'failed' AND s.retry_at IS NULL))`
	return sweepQueries{
		// $1 after (key), $2 page size, $3 retention (µs). A row is free
		// when it has no token or its lease expired; expires_at is when it
		// ended. The fence must be below the clock in µs, the floor of the
		// next grant's fence.
		leases: `WITH c AS (SELECT clock_timestamp() AS now),
page AS (SELECT key FROM ` + q("leases") + ` WHERE key > $1 ORDER BY key LIMIT $2),
del AS (DELETE FROM ` + q("leases") + ` AS l USING c
	WHERE l.key IN (SELECT key FROM page)
	AND (l.token IS NULL OR l.expires_at <= c.now)
	AND l.expires_at <= c.now - $3::bigint * interval '1 microsecond'
	AND l.fence < (extract(epoch FROM c.now) * 1000000)::bigint
	RETURNING 1)
SELECT (SELECT count(*) FROM page), coalesce((SELECT max(key) FROM page), ''), (SELECT count(*) FROM del)`,
		// Places in a lease's queue whose stay ended (a waiter that
		// crashed, or gave up without leaving).
		waiters: `DELETE FROM ` + q("lease_waiters") + ` WHERE (key, waiter) IN (SELECT key, waiter FROM ` + q("lease_waiters") + `
	WHERE stay_until <= clock_timestamp() LIMIT $1)
AND stay_until <= clock_timestamp()`,
		idempotency: clock + `DELETE FROM ` + q("idempotency") + ` AS r USING c
WHERE (r.scope, r.key) IN (SELECT scope, key FROM ` + q("idempotency") + `, c
	WHERE expires_at <= c.now AND (claim_until IS NULL OR claim_until <= c.now) LIMIT $1)
AND r.expires_at <= c.now AND (r.claim_until IS NULL OR r.claim_until <= c.now)`,
		sessions: clock + `DELETE FROM ` + q("sessions") + ` AS s USING c
WHERE s.id IN (SELECT id FROM ` + q("sessions") + `, c WHERE NOT (idle_until > c.now AND absolute_until > c.now) LIMIT $1)
AND NOT (s.idle_until > c.now AND s.absolute_until > c.now)`,
		limits: `DELETE FROM ` + q("ratelimits") + ` WHERE key IN (SELECT key FROM ` + q("ratelimits") + `
	WHERE expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint LIMIT $1)
AND expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`,
		permits: `DELETE FROM ` + q("ratelimit_permits") + ` WHERE key IN (SELECT key FROM ` + q("ratelimit_permits") + `
	WHERE expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint LIMIT $1)
AND expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`,
		// $1 limit, $2 retention (µs). A job's latest slot record stays.
		slots: clock + `DELETE FROM ` + q("schedule_slots") + ` AS d USING c
WHERE (d.job, d.slot_id) IN (SELECT s.job, s.slot_id FROM ` + q("schedule_slots") + ` AS s, c
	WHERE ` + final + `
	AND coalesce(s.finished_at, s.slot_time) <= c.now - $2::bigint * interval '1 microsecond'
	AND s.slot_time < (SELECT max(m.slot_time) FROM ` + q("schedule_slots") + ` AS m WHERE m.job = s.job)
	LIMIT $1)
AND (d.state IN ('done', 'skipped', 'missed') OR (d.state = 'failed' AND d.retry_at IS NULL))`,
		// A ledger row goes after its slot's record went.
		ledger: clock + `DELETE FROM ` + q("schedule_ledger") + ` AS g USING c
WHERE (g.job, g.slot_id) IN (SELECT l.job, l.slot_id FROM ` + q("schedule_ledger") + ` AS l, c
	WHERE l.completed_at <= c.now - $2::bigint * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM ` + q("schedule_slots") + ` AS s WHERE s.job = l.job AND s.slot_id = l.slot_id)
	LIMIT $1)`,
		// Attempt histories go with their slot's record (both are written
		// in one transaction).
		hist: `DELETE FROM ` + q("schedule_attempts") + ` AS h
WHERE (h.job, h.slot_id) IN (SELECT a.job, a.slot_id FROM ` + q("schedule_attempts") + ` AS a
	WHERE NOT EXISTS (SELECT 1 FROM ` + q("schedule_slots") + ` AS s WHERE s.job = a.job AND s.slot_id = a.slot_id)
	LIMIT $1)
AND NOT EXISTS (SELECT 1 FROM ` + q("schedule_slots") + ` AS s WHERE s.job = h.job AND s.slot_id = h.slot_id)`,
	}
}

// Sweep deletes what is past its retention, at most o.Limit rows of each
// kind, judged on the server's clock:
//
//   - lease rows not held for o.FenceRetention (default 7 days; the time a
//     lease ended is kept in expires_at), once the clock in microseconds
//     has passed the row's fence, so the next grant's fence (floored at
//     the clock) is still greater. Rows are examined in key order, o.Limit
//     per call, from where the last call stopped;
//   - places in a lease's queue of waiters whose stay ended;
//   - idempotency records whose retention ended (and whose claim, if any,
//     expired);
//   - sessions past their idle or absolute deadline;
//   - rate limit state and concurrency permits that expired;
//   - schedule slot records final for o.ScheduleRetention (default 30
//     days), except each job's latest, and the ledger rows and attempt
//     histories of slots whose record went.
//
// Live rows are never touched: each statement re-checks the row it
// deletes. Result.More says that a bound was reached or the lease scan has
// not come round. Sweep never changes the schema; run it from a periodic
// job, [Store.StartSweeper] or `tenure sweep`.
func (s *Store) Sweep(ctx context.Context, o retention.Options) (retention.Result, error) {
	o, err := o.Resolve()
	if err != nil {
		return retention.Result{}, err
	}
	q := s.view("sweep", func() any {
		v := sweepSQL(pgx.Identifier{s.schema}.Sanitize())
		return &v
	}).(*sweepQueries)
	var res retention.Result

	s.sweepMu.Lock()
	if s.sweepRet != o.FenceRetention {
		// Another retention: rows examined under the old one may qualify
		// now, so the scan starts over.
		s.sweepAfter, s.sweepRet = "", o.FenceRetention
	}
	after := s.sweepAfter
	if after == "" {
		s.sweepWhole = true // this round starts at the first key
	}
	s.sweepMu.Unlock()
	var examined, deleted int64
	var last string
	if err := s.db.queryRow(ctx, q.leases, []any{after, o.Limit, o.FenceRetention}, &examined, &last, &deleted); err != nil {
		return res, s.wrap(ctx, "sweep leases", err)
	}
	res.Add(retention.Leases, int(deleted))
	s.sweepMu.Lock()
	if examined < int64(o.Limit) {
		// Came round: the next call starts again at the first key. A
		// round that began after it has not seen the first keys yet.
		s.sweepAfter = ""
		if !s.sweepWhole {
			res.More = true
		}
		s.sweepWhole = false
	} else {
		s.sweepAfter = last
		res.More = true
	}
	s.sweepMu.Unlock()

	for _, k := range []struct {
		kind, sql string
		args      []any
	}{
		{retention.Leases, q.waiters, []any{o.Limit}},
		{retention.Idempotency, q.idempotency, []any{o.Limit}},
		{retention.Sessions, q.sessions, []any{o.Limit}},
		{retention.RateLimits, q.limits, []any{o.Limit}},
		{retention.Permits, q.permits, []any{o.Limit}},
		{retention.ScheduleSlots, q.slots, []any{o.Limit, o.ScheduleRetention}},
		{retention.ScheduleLedger, q.ledger, []any{o.Limit, o.ScheduleRetention}},
		{retention.ScheduleSlots, q.hist, []any{o.Limit}},
	} {
		n, err := s.db.exec(ctx, k.sql, k.args...)
		if err != nil {
			return res, s.wrap(ctx, "sweep "+k.kind, err)
		}
		res.Add(k.kind, int(n))
		if n >= int64(o.Limit) {
			res.More = true
		}
	}
	return res, nil
}

// StartSweeper runs Sweep every interval in the background until ctx ends
// or stop is called (see retention.Start). Errors are retried at the next
// interval.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration, o retention.Options) (stop func(), err error) {
	return retention.Start(ctx, s, interval, o, nil)
}
