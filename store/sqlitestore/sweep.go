package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/tenurekit/tenure/retention"
)

// sweepQueries are the statements of Sweep.
type sweepQueries struct {
	leasePage, floor, leases                           string
	idempotency, sessions, limits, slots, ledger, hist string
	waiters                                            string
}

// endedPage selects the lease rows of Sweep's page (?1 after, ?2 page
// size) whose lease ended at least the retention ago (?3 now, ?4
// retention in µs) and that no live waiter is queued for.
const endedPage = `"key" IN (SELECT "key" FROM $L WHERE "key" > ?1 ORDER BY "key" LIMIT ?2)
			AND (token IS NULL OR expires_us <= ?3) AND expires_us <= ?3 - ?4
			AND NOT EXISTS (SELECT 1 FROM $W AS w WHERE w."key" = $L."key" AND w.stay_until_us > ?3)`

func sweepSQL(prefix string) sweepQueries {
	r := strings.NewReplacer("$P", `"`+prefix+`lease_fence_floor"`, "$L", `"`+prefix+`leases"`, "$T", `"`+prefix+`idempotency"`, "$S", `"`+prefix+`sessions"`,
		"$R", `"`+prefix+`ratelimit"`, "$K", `"`+prefix+`schedule_slots"`, "$G", `"`+prefix+`schedule_ledger"`,
		"$A", `"`+prefix+`schedule_attempts"`, "$W", `"`+prefix+`lease_waiters"`)
	const final = `(state IN ('done', 'skipped', 'missed') OR (state = 'failed' AND retry_us IS NULL))`
	return sweepQueries{
		// ?1 after, ?2 page size.
		leasePage: r.Replace(`SELECT count(*), coalesce(max("key"), '') FROM (SELECT "key" FROM $L WHERE "key" > ?1 ORDER BY "key" LIMIT ?2)`),
		// ?1 after, ?2 page size, ?3 now, ?4 retention (µs). Free (no
		// token, or expired), ended at least the retention ago, and no
		// live waiter queued (a fresh row would not ask the queue). The
		// floor is raised to their fences first, in the same write
		// transaction: the next grant of their keys is above it.
		floor:  r.Replace(`UPDATE $P SET fence = max(fence, coalesce((SELECT max(fence) FROM $L WHERE ` + endedPage + `), 0)) WHERE id = 1`),
		leases: r.Replace(`DELETE FROM $L WHERE ` + endedPage),
		// ?1 now, ?2 limit. Places in a lease's queue whose stay ended (a
		// waiter that crashed, or gave up without leaving).
		waiters: r.Replace(`DELETE FROM $W WHERE ("key", waiter) IN (SELECT "key", waiter FROM $W WHERE stay_until_us <= ?1 LIMIT ?2)`),
		idempotency: r.Replace(`DELETE FROM $T WHERE (scope, "key") IN (SELECT scope, "key" FROM $T
			WHERE expires_us <= ?1 AND (claim_us IS NULL OR claim_us <= ?1) LIMIT ?2)`),
		sessions: r.Replace(`DELETE FROM $S WHERE id IN (SELECT id FROM $S WHERE NOT (idle_us > ?1 AND absolute_us > ?1) LIMIT ?2)`),
		limits:   r.Replace(`DELETE FROM $R WHERE "key" IN (SELECT "key" FROM $R WHERE expires_us <= ?1 LIMIT ?2)`),
		// ?1 now, ?2 limit, ?3 retention (µs). A job's latest slot stays.
		slots: r.Replace(`DELETE FROM $K WHERE (job, slot_id) IN (SELECT s.job, s.slot_id FROM $K AS s
			WHERE ` + strings.ReplaceAll(strings.ReplaceAll(final, "state", "s.state"), "retry_us", "s.retry_us") + `
			AND coalesce(s.finished_us, s.slot_us) <= ?1 - ?3
			AND s.slot_us < (SELECT max(m.slot_us) FROM $K AS m WHERE m.job = s.job)
			LIMIT ?2)`),
		// Ledger rows and attempt histories go after their slot's record.
		ledger: r.Replace(`DELETE FROM $G WHERE (job, slot_id) IN (SELECT l.job, l.slot_id FROM $G AS l
			WHERE l.completed_us <= ?1 - ?3
			AND NOT EXISTS (SELECT 1 FROM $K AS s WHERE s.job = l.job AND s.slot_id = l.slot_id)
			LIMIT ?2)`),
		hist: r.Replace(`DELETE FROM $A WHERE (job, slot_id) IN (SELECT a.job, a.slot_id FROM $A AS a
			WHERE NOT EXISTS (SELECT 1 FROM $K AS s WHERE s.job = a.job AND s.slot_id = a.slot_id)
			LIMIT ?2)`),
	}
}

// Sweep deletes what is past its retention, at most o.Limit rows of each
// kind, judged on the store's clock (Options.Clock):
//
//   - lease rows not held for o.FenceRetention (default 0: as soon as the
//     lease ended; a released row keeps the time its lease ended) that no
//     live waiter is queued for. The fence floor (lease_fence_floor) is raised to
//     their fences in the same transaction, so a later grant of their keys
//     is still above every fence they had, whatever the clock says. Rows
//     are examined in key order, o.Limit per call, from where the last call
//     stopped;
//   - places in a lease's queue of waiters whose stay ended;
//   - idempotency records whose retention ended (and whose claim expired);
//   - sessions past their idle or absolute deadline;
//   - rate limit state that expired;
//   - schedule slot records final for o.ScheduleRetention (default 30
//     days), except each job's latest, and the ledger rows and attempt
//     histories of slots whose record went.
//
// Each kind is one write transaction that re-checks the rows it deletes,
// so a live row is never touched. Result.More says that a bound was
// reached or the lease scan has not come round.
func (s *Store) Sweep(ctx context.Context, o retention.Options) (retention.Result, error) {
	o, err := o.Resolve()
	if err != nil {
		return retention.Result{}, err
	}
	q := s.view("sweep", func() any {
		v := sweepSQL(s.q.prefix)
		return &v
	}).(*sweepQueries)
	var res retention.Result

	s.sweepMu.Lock()
	if s.sweepRet != o.FenceRetention {
		s.sweepAfter, s.sweepRet = "", o.FenceRetention
	}
	after := s.sweepAfter
	if after == "" {
		s.sweepWhole = true
	}
	s.sweepMu.Unlock()
	var examined int
	var last string
	var deleted int64
	err = s.write(ctx, "sweep", "leases", func(tx *sql.Tx, now int64) error {
		if err := tx.QueryRowContext(ctx, q.leasePage, after, o.Limit).Scan(&examined, &last); err != nil {
			return unavailable("sweep", "leases", err)
		}
		args := []any{after, o.Limit, now, o.FenceRetention.Microseconds()}
		if _, err := tx.ExecContext(ctx, q.floor, args...); err != nil {
			return unavailable("sweep", "leases", err)
		}
		r, err := tx.ExecContext(ctx, q.leases, args...)
		if err != nil {
			return unavailable("sweep", "leases", err)
		}
		deleted, _ = r.RowsAffected()
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Add(retention.Leases, int(deleted))
	s.sweepMu.Lock()
	if examined < o.Limit {
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

	ret := o.ScheduleRetention.Microseconds()
	for _, k := range []struct {
		kind, sql string
		sched     bool
	}{
		{retention.Leases, q.waiters, false},
		{retention.Idempotency, q.idempotency, false},
		{retention.Sessions, q.sessions, false},
		{retention.RateLimits, q.limits, false},
		{retention.ScheduleSlots, q.slots, true},
		{retention.ScheduleLedger, q.ledger, true},
		{retention.ScheduleSlots, q.hist, true},
	} {
		var n int64
		err := s.write(ctx, "sweep", k.kind, func(tx *sql.Tx, now int64) error {
			args := []any{now, o.Limit}
			if k.sched {
				args = append(args, ret)
			}
			r, err := tx.ExecContext(ctx, k.sql, args...)
			if err != nil {
				return unavailable("sweep", k.kind, err)
			}
			n, _ = r.RowsAffected()
			return nil
		})
		if err != nil {
			return res, err
		}
		res.Add(k.kind, int(n))
		if n >= int64(o.Limit) {
			res.More = true
		}
	}
	return res, nil
}

// StartSweeper runs Sweep every interval in the background until ctx ends
// or stop is called (see retention.Start).
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration, o retention.Options) (stop func(), err error) {
	return retention.Start(ctx, s, interval, o, nil)
}
