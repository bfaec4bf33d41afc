package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/retention"
)

// sweepQueries are the statements of Sweep; each deletes at most its
// limit of rows and re-checks, on the row it deletes, that it is past its
// retention, so a row taken or renewed meanwhile is kept. The lease rows
// go in two statements (leasesRaise, then leasesDrop; see Sweep).
type sweepQueries struct {
	leasesRaise, leasesDrop                                              string
	waiters, idempotency, sessions, limits, permits, slots, ledger, hist string
	// usersLock and usersDrop reclaim session_users rows (see sweepUsers).
	usersLock, usersDrop string
}

// endedLease is the condition, on a lease row aliased a and c.now, that
// the row's lease ended (it has no token, or its lease expired; expires_at
// is when it ended) at least $3 µs ago, and that no live waiter is queued
// for its key (a key with waiters keeps its row, whose waiters hint keeps
// a plain acquire from jumping the queue).
func endedLease(a, waiters string) string {
	return `(` + a + `.token IS NULL OR ` + a + `.expires_at <= c.now)
	AND ` + a + `.expires_at <= c.now - $3::bigint * interval '1 microsecond'
	AND (NOT ` + a + `.waiters OR NOT EXISTS (SELECT 1 FROM ` + waiters + ` AS w WHERE w.key = ` + a + `.key AND w.stay_until > c.now))`
}

func sweepSQL(schema string) sweepQueries {
	q := func(t string) string { return schema + "." + t }
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	// A schedule record is final unless running or failed with a retry
	// pending (schedule/driver.Final).
	const final = `(s.state IN ('done', 'skipped', 'missed') OR (s.state = 'failed' AND s.retry_at IS NULL))`
	return sweepQueries{
		// $1 after (key), $2 page size, $3 retention (µs): examines the
		// page of rows after $1 and raises the fence floor to the
		// greatest fence of the page's ended rows (never lowers it: two
		// sweepers in different processes raise it in turn, each to the
		// greater value). It returns the page's size and last key, how
		// many rows ended, and the floor after the raise (0 when none
		// ended and the floor was not touched).
		leasesRaise: `WITH c AS (SELECT clock_timestamp() AS now),
page AS (SELECT key, token, fence, expires_at, waiters FROM ` + q("leases") + ` WHERE key > $1 ORDER BY key LIMIT $2),
ended AS (SELECT p.fence FROM page AS p, c WHERE ` + endedLease("p", q("lease_waiters")) + `),
raised AS (INSERT INTO ` + q("lease_fence_floor") + ` AS f (id, fence)
	SELECT true, max(fence) FROM ended HAVING count(*) > 0
	ON CONFLICT (id) DO UPDATE SET fence = greatest(f.fence, excluded.fence) RETURNING f.fence)
SELECT (SELECT count(*) FROM page), coalesce((SELECT max(key) FROM page), ''),
	(SELECT count(*) FROM ended), coalesce((SELECT fence FROM raised), 0)`,
		// $1 after, $2 the page's last key, $3 retention (µs), $4 the
		// floor leasesRaise committed, $5 limit: deletes the page's rows
		// that are still ended and whose fence is at most the floor (a
		// row granted and ended again since has a greater fence and
		// stays for the next sweep). Rows locked by another transaction
		// (a grant under way, or CheckHolder or a schedule completion in
		// a caller's transaction) are skipped, never waited for.
		leasesDrop: `WITH c AS (SELECT clock_timestamp() AS now)
DELETE FROM ` + q("leases") + ` AS l USING c
WHERE l.key IN (SELECT d.key FROM ` + q("leases") + ` AS d, c
	WHERE d.key > $1 AND d.key <= $2 AND d.fence <= $4 AND ` + endedLease("d", q("lease_waiters")) + `
	ORDER BY d.key LIMIT $5 FOR UPDATE OF d SKIP LOCKED)
AND l.fence <= $4 AND ` + endedLease("l", q("lease_waiters")),
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
		// $1 limit: locks rows of session_users whose user has no session
		// row, skipping rows a Create, Rotate or DeleteUser holds.
		usersLock: `SELECT su.user_id FROM ` + q("session_users") + ` AS su
WHERE NOT EXISTS (SELECT 1 FROM ` + q("sessions") + ` AS s WHERE s.user_id = su.user_id)
LIMIT $1 FOR UPDATE OF su SKIP LOCKED`,
		// $1 the users locked: in a statement of its own, so with a
		// snapshot taken after the locks were held, it re-checks that each
		// user still has no session row.
		usersDrop: `DELETE FROM ` + q("session_users") + ` AS su WHERE su.user_id = ANY($1::text::text[])
AND NOT EXISTS (SELECT 1 FROM ` + q("sessions") + ` AS s WHERE s.user_id = su.user_id)`,
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
//   - lease rows whose lease ended (released, or expired) at least
//     o.FenceRetention ago (default 0: as soon as it ended; expires_at
//     keeps the time a lease ended), unless a live waiter is queued for
//     the key. Rows are examined in key order, o.Limit per call, from
//     where the last call stopped. See "The fence floor" below;
//   - places in a lease's queue of waiters whose stay ended;
//   - idempotency records whose retention ended (and whose claim, if any,
//     expired);
//   - sessions past their idle or absolute deadline, and the per-user
//     row (session_users) of a user left with no session;
//   - rate limit state and concurrency permits that expired;
//   - schedule slot records final for o.ScheduleRetention (default 30
//     days), except each job's latest, and the ledger rows and attempt
//     histories of slots whose record went.
//
// Live rows are never touched: each statement re-checks the row it
// deletes. Result.More says that a bound was reached or the lease scan has
// not come round. Sweep never changes the schema; run it from a periodic
// job, [Store.StartSweeper] or `tenure sweep`.
//
// # The fence floor
//
// A dropped lease row takes its key's last fence with it; the fence floor
// (the one row of lease_fence_floor) keeps it instead, for all keys at
// once. The rule: a lease row is deleted only once the committed floor is
// at least its fence, and every grant's fence is greater than the floor it
// reads in its own statement, the key's last fence (if the key has a row)
// and the clock in microseconds. Sweep therefore drops the rows of a page
// in two steps. First, in a transaction of its own that commits, it raises
// the floor to the greatest fence of the page's ended rows (GREATEST(floor,
// that fence): concurrent sweepers, in other processes too, each leave the
// greater value). Then a second statement deletes those rows, re-checking
// on each that it is still ended and that its fence is at most the floor
// just raised; rows locked by another transaction (CheckHolder or a
// schedule completion in a caller's transaction, a grant under way) are
// skipped, so a caller's transaction never waits for a sweep. Grants and
// releases never write the floor, so grants of different keys never wait
// for each other.
//
// A grant that reaches a key's row before it is deleted takes the row over
// (its fence follows the row's); one that starts after the floor was raised
// reads the raised floor. A grant statement whose snapshot was taken
// before the raise committed and that reaches the key only after the
// delete sees neither; the schema's check of inserted lease rows
// (migration 7, lease_fence_above_floor) reads the floor again once the
// row is in and refuses it, and the grant is made again with the raised
// floor. So no interleaving of a grant with a sweep, in this process or
// another, grants a fence at or below one a sweep dropped.
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
	var examined, ended, floor, deleted int64
	var last string
	if err := s.db.queryRow(ctx, q.leasesRaise, []any{after, o.Limit, o.FenceRetention}, &examined, &last, &ended, &floor); err != nil {
		return res, s.wrap(ctx, "sweep leases: raise the fence floor", err)
	}
	if ended > 0 {
		// The raise has committed: only now may the rows go.
		deleted, err = s.db.exec(ctx, q.leasesDrop, after, last, o.FenceRetention, floor, o.Limit)
		if err != nil {
			return res, s.wrap(ctx, "sweep leases", err)
		}
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
		if k.sql == q.sessions {
			n, more, err := s.sweepUsers(ctx, q, o.Limit)
			if err != nil {
				return res, s.wrap(ctx, "sweep session users", err)
			}
			res.Add(retention.Sessions, n)
			res.More = res.More || more
		}
	}
	return res, nil
}

// sweepUsers deletes up to limit rows of session_users whose user has no
// session left. A user's row is the lock that Create, Rotate and DeleteUser
// serialize on; every statement that adds a session row of a user holds it
// first. So the sweep locks the rows (skipping those held) and only then,
// in a second statement with a fresh snapshot, re-checks that no session
// row exists: a Create that committed before the lock was taken is seen,
// and one after it waits and then inserts the row anew.
func (s *Store) sweepUsers(ctx context.Context, q *sweepQueries, limit int) (n int, more bool, err error) {
	err = s.db.inTx(ctx, func(tx querier) error {
		var users []string
		if err := tx.query(ctx, q.usersLock, []any{limit}, func(scan func(dest ...any) error) error {
			var u string
			if err := scan(&u); err != nil {
				return err
			}
			users = append(users, u)
			return nil
		}); err != nil {
			return err
		}
		more = len(users) >= limit
		if len(users) == 0 {
			return nil
		}
		d, err := tx.exec(ctx, q.usersDrop, pgArray(users))
		n = int(d)
		return err
	})
	return n, more, err
}

// StartSweeper runs Sweep every interval in the background until ctx ends
// or stop is called (see retention.Start). Errors are retried at the next
// interval.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration, o retention.Options) (stop func(), err error) {
	return retention.Start(ctx, s, interval, o, nil)
}
