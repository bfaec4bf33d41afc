package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

type schedQueries struct {
	one, lock, get, upsert, addLedger, slots, unfinished, last, complete string
	putHistory, defLock, def, putDef                                     string
}

const schedCols = `job, slot_id, slot_time, state, node, attempts, fence, started_at, finished_at, error, retry_at`

// schedSel reads a record's columns and its history (schedule_attempts).
const schedSel = `SELECT ` + schedCols + `,
	(SELECT a.history::text FROM $S.schedule_attempts a WHERE a.job = r.job AND a.slot_id = r.slot_id)
FROM $S.schedule_slots r`

func (s *Store) schedQ() *schedQueries {
	return s.view("schedule", func() any {
		r := strings.NewReplacer("$S", pgx.Identifier{s.schema}.Sanitize())
		return &schedQueries{
			// $1 the slot's lock, $2 the job's: a slot's writes take the
			// job's lock shared, Register takes it exclusive, so no
			// attempt begins under a definition that was just replaced.
			lock: `SELECT pg_advisory_xact_lock($1), pg_advisory_xact_lock_shared($2)`,
			one:  r.Replace(schedSel + ` WHERE job = $1 AND slot_id = $2`),
			get: r.Replace(`SELECT clock_timestamp(), r.job, r.slot_id, r.slot_time, r.state, r.node, r.attempts, r.fence,
	r.started_at, r.finished_at, r.error, r.retry_at,
	EXISTS (SELECT 1 FROM $S.schedule_ledger g WHERE g.job = $1 AND g.slot_id = $2),
	(SELECT a.history::text FROM $S.schedule_attempts a WHERE a.job = $1 AND a.slot_id = $2),
	(SELECT d.fingerprint FROM $S.schedule_jobs d WHERE d.job = $1)
FROM (SELECT 1) one LEFT JOIN $S.schedule_slots r ON r.job = $1 AND r.slot_id = $2`),
			putHistory: r.Replace(`INSERT INTO $S.schedule_attempts (job, slot_id, history) VALUES ($1, $2, $3::text::jsonb)
ON CONFLICT (job, slot_id) DO UPDATE SET history = excluded.history`),
			defLock: `SELECT pg_advisory_xact_lock($1)`,
			def: r.Replace(`SELECT d.fingerprint, d.spec, d.node, d.registered_at
FROM (SELECT 1) one LEFT JOIN $S.schedule_jobs d ON d.job = $1`),
			putDef: r.Replace(`INSERT INTO $S.schedule_jobs (job, fingerprint, spec, node, registered_at)
VALUES ($1, $2, $3, $4, clock_timestamp())
ON CONFLICT (job) DO UPDATE SET fingerprint = excluded.fingerprint, spec = excluded.spec,
	node = excluded.node, registered_at = excluded.registered_at`),
			upsert: r.Replace(`INSERT INTO $S.schedule_slots (` + schedCols + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (job, slot_id) DO UPDATE SET state = excluded.state, node = excluded.node,
	attempts = excluded.attempts, fence = excluded.fence, started_at = excluded.started_at,
	finished_at = excluded.finished_at, error = excluded.error, retry_at = excluded.retry_at`),
			addLedger: r.Replace(`INSERT INTO $S.schedule_ledger (job, slot_id, fence, completed_at)
VALUES ($1, $2, $3, clock_timestamp()) ON CONFLICT DO NOTHING`),
			slots: r.Replace(schedSel + `
WHERE job = $1 AND slot_time >= $2 AND slot_time < $3 ORDER BY slot_time LIMIT $4`),
			unfinished: r.Replace(schedSel + `
WHERE job = $1 AND (state = 'running' OR (state = 'failed' AND retry_at IS NOT NULL))
ORDER BY slot_time LIMIT $2`),
			last: r.Replace(`SELECT max(slot_time) FROM $S.schedule_slots WHERE job = $1`),
			// $1 lease key, $2 token, $3 fence, $4 job, $5 slot ID. One
			// statement: lock the claim's lease row if it is still the
			// slot's current claim (token, fence, expiry on the server's
			// clock), insert the ledger row, mark the record done; on a
			// refusal, raise (schedule_refuse), which aborts the
			// transaction.
			complete: r.Replace(`WITH c AS (SELECT clock_timestamp() AS now),
h AS (SELECT l.fence FROM $S.leases l, c
	WHERE l.key = $1 AND l.token = $2 AND l.fence = $3 AND l.expires_at > c.now FOR UPDATE OF l),
g AS (INSERT INTO $S.schedule_ledger (job, slot_id, fence, completed_at)
	SELECT $4, $5, $3, c.now FROM h, c ON CONFLICT DO NOTHING RETURNING 1),
u AS (UPDATE $S.schedule_slots SET state = 'done', finished_at = (SELECT now FROM c), error = '', retry_at = NULL
	WHERE job = $4 AND slot_id = $5 AND EXISTS (SELECT 1 FROM g) RETURNING 1),
a AS (UPDATE $S.schedule_attempts SET history = (
		SELECT coalesce(jsonb_agg(CASE WHEN x.e->>'f' = ($3::bigint)::text AND x.e->>'o' = 'running'
			THEN x.e || jsonb_build_object('o', 'done', 'e', ((extract(epoch FROM c.now) * 1000000)::bigint)::text)
			ELSE x.e END ORDER BY x.i), '[]'::jsonb)
		FROM jsonb_array_elements(history) WITH ORDINALITY AS x(e, i), c)
	WHERE job = $4 AND slot_id = $5 AND EXISTS (SELECT 1 FROM g) RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM g) THEN (SELECT count(*) FROM u) >= 0
	WHEN EXISTS (SELECT 1 FROM h) OR EXISTS (SELECT 1 FROM $S.schedule_ledger WHERE job = $4 AND slot_id = $5)
		THEN $S.schedule_refuse('completed')
	ELSE $S.schedule_refuse('stale') END`),
		}
	}).(*schedQueries)
}

// Schedules returns the store's schedule.Store view: slot records in
// <schema>.schedule_slots, the completion ledger in
// <schema>.schedule_ledger, claims on the leases table. Begin, Finish and
// Mark are each one transaction serialized per slot (a transaction-scoped
// advisory lock), judged on clock_timestamp().
func (s *Store) Schedules() schedule.Store { return schedules{s} }

type schedules struct{ s *Store }

func (v schedules) Claims() lease.Store { return v.s.Leases() }

func (v schedules) fail(ctx context.Context, op string, err error) error {
	if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrStale) ||
		errors.Is(err, schedule.ErrFinal) || errors.Is(err, schedule.ErrNotDue) || errors.Is(err, schedule.ErrSuperseded) {
		return err
	}
	err = v.s.wrap(ctx, op, err)
	if errors.Is(err, lease.ErrUnavailable) {
		return fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	return err
}

func (v schedules) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := v.s.db.queryRow(ctx, `SELECT clock_timestamp()`, nil, &now); err != nil {
		return time.Time{}, v.fail(ctx, "read the clock", err)
	}
	return now, nil
}

// slotLock is the advisory lock key of a slot.
func slotLock(job, id string) int64 {
	h := fnv.New64a()
	io.WriteString(h, "tenure/schedule\x00"+job+"\x00"+id)
	return int64(h.Sum64())
}

func pgTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func pgTS(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// pgText makes an error message storable as text: valid UTF-8, no NUL.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}

func schedScan(scan func(dest ...any) error) (schedule.Record, error) {
	var (
		r                   schedule.Record
		state               string
		fence               int64
		started, fin, retry pgtype.Timestamptz
		hist                pgtype.Text
	)
	if err := scan(&r.Job, &r.SlotID, &r.SlotTime, &state, &r.Node, &r.Attempts, &fence, &started, &fin, &r.Error, &retry, &hist); err != nil {
		return schedule.Record{}, err
	}
	var err error
	if r.History, err = scheddriver.DecodeHistory(hist.String); err != nil {
		return schedule.Record{}, err
	}
	r.State, r.Fence = schedule.State(state), uint64(fence)
	r.Started, r.Finished, r.RetryAt = pgTime(started), pgTime(fin), pgTime(retry)
	return r, nil
}

// slotTx runs fn in a transaction holding the slot's advisory lock, with
// the slot's record (nil if none), whether the ledger has it, and the
// server's clock, all read after the lock was taken.
func (v schedules) slotTx(ctx context.Context, job, id, fp string, fn func(tx querier, cur *schedule.Record, completed bool, now time.Time) error) error {
	q := v.s.schedQ()
	return v.s.db.inTx(ctx, func(tx querier) error {
		var (
			now       time.Time
			jobCol    pgtype.Text
			idCol     pgtype.Text
			slotTime  pgtype.Timestamptz
			state     pgtype.Text
			node      pgtype.Text
			attempts  pgtype.Int4
			fenceCol  pgtype.Int8
			started   pgtype.Timestamptz
			fin       pgtype.Timestamptz
			errCol    pgtype.Text
			retry     pgtype.Timestamptz
			completed bool
			hist, def pgtype.Text
		)
		err := tx.pipeline(ctx, stmt{sql: q.lock, args: []any{slotLock(job, id), jobLock(job)}},
			stmt{sql: q.get, args: []any{job, id}, dest: []any{&now, &jobCol, &idCol, &slotTime, &state, &node, &attempts, &fenceCol, &started, &fin, &errCol, &retry, &completed, &hist, &def}})
		if err != nil {
			return err
		}
		if err := scheddriver.ApplyDefinition(job, def.String, fp); err != nil {
			return err
		}
		var cur *schedule.Record
		if jobCol.Valid {
			cur = &schedule.Record{Job: jobCol.String, SlotID: idCol.String, SlotTime: slotTime.Time, State: schedule.State(state.String),
				Node: node.String, Attempts: int(attempts.Int32), Fence: uint64(fenceCol.Int64), Started: pgTime(started),
				Finished: pgTime(fin), Error: errCol.String, RetryAt: pgTime(retry)}
			if cur.History, err = scheddriver.DecodeHistory(hist.String); err != nil {
				return err
			}
		}
		return fn(tx, cur, completed, now)
	})
}

func (v schedules) put(ctx context.Context, tx querier, r schedule.Record) error {
	_, err := tx.exec(ctx, v.s.schedQ().upsert, r.Job, r.SlotID, r.SlotTime, string(r.State), r.Node, r.Attempts,
		int64(r.Fence), pgTS(r.Started), pgTS(r.Finished), pgText(r.Error), pgTS(r.RetryAt))
	if err != nil || r.History == nil {
		return err
	}
	h := make([]schedule.Attempt, len(r.History))
	for i, a := range r.History {
		a.Error = pgText(a.Error)
		h[i] = a
	}
	_, err = tx.exec(ctx, v.s.schedQ().putHistory, r.Job, r.SlotID, scheddriver.EncodeHistory(h))
	return err
}

// jobLock is the advisory lock key of a job's definition.
func jobLock(job string) int64 {
	h := fnv.New64a()
	io.WriteString(h, "tenure/schedule-job\x00"+job)
	return int64(h.Sum64())
}

func (v schedules) Register(ctx context.Context, req scheddriver.RegisterRequest) (schedule.Definition, error) {
	if err := req.Validate(); err != nil {
		return schedule.Definition{}, err
	}
	q := v.s.schedQ()
	var prev schedule.Definition
	err := v.s.db.inTx(ctx, func(tx querier) error {
		var (
			fp, spec, node pgtype.Text
			at             pgtype.Timestamptz
		)
		err := tx.pipeline(ctx, stmt{sql: q.defLock, args: []any{jobLock(req.Job)}},
			stmt{sql: q.def, args: []any{req.Job}, dest: []any{&fp, &spec, &node, &at}})
		if err != nil {
			return err
		}
		if fp.Valid {
			prev = schedule.Definition{Job: req.Job, Fingerprint: fp.String, Spec: spec.String, Node: node.String, Registered: pgTime(at)}
		}
		if prev.Fingerprint == req.Fingerprint {
			return nil
		}
		_, err = tx.exec(ctx, q.putDef, req.Job, req.Fingerprint, pgText(scheddriver.CutError(req.Spec)), req.Node)
		return err
	})
	if err != nil {
		return schedule.Definition{}, v.fail(ctx, "register the definition of "+req.Job, err)
	}
	return prev, nil
}

func (v schedules) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Definition{}, err
	}
	var (
		fp, spec, node pgtype.Text
		at             pgtype.Timestamptz
	)
	if err := v.s.db.queryRow(ctx, v.s.schedQ().def, []any{job}, &fp, &spec, &node, &at); err != nil {
		return schedule.Definition{}, v.fail(ctx, "read the definition of "+job, err)
	}
	if !fp.Valid {
		return schedule.Definition{}, fmt.Errorf("pgstore: job %q: no registered definition: %w", job, schedule.ErrNotFound)
	}
	return schedule.Definition{Job: job, Fingerprint: fp.String, Spec: spec.String, Node: node.String, Registered: pgTime(at)}, nil
}

func (v schedules) Begin(ctx context.Context, req scheddriver.BeginRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	var out schedule.Record
	err := v.slotTx(ctx, req.Job, req.SlotID, req.Definition, func(tx querier, cur *schedule.Record, completed bool, now time.Time) error {
		r, write, err := scheddriver.ApplyBegin(cur, completed, req, now)
		if err != nil {
			return err
		}
		out = r
		if write {
			return v.put(ctx, tx, r)
		}
		return nil
	})
	if err != nil {
		return schedule.Record{}, v.fail(ctx, "begin slot "+req.SlotID, err)
	}
	return out, nil
}

func (v schedules) Finish(ctx context.Context, req scheddriver.FinishRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	var out schedule.Record
	err := v.slotTx(ctx, req.Job, req.SlotID, "", func(tx querier, cur *schedule.Record, _ bool, now time.Time) error {
		r, write, err := scheddriver.ApplyFinish(cur, req, now)
		if err != nil {
			return err
		}
		out = r
		if !write {
			return nil
		}
		if err := v.put(ctx, tx, r); err != nil {
			return err
		}
		if r.State == schedule.Done {
			_, err = tx.exec(ctx, v.s.schedQ().addLedger, r.Job, r.SlotID, int64(r.Fence))
		}
		return err
	})
	if err != nil {
		return schedule.Record{}, v.fail(ctx, "finish slot "+req.SlotID, err)
	}
	return out, nil
}

func (v schedules) Mark(ctx context.Context, req scheddriver.MarkRequest) (schedule.Record, bool, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, false, err
	}
	var (
		out   schedule.Record
		wrote bool
	)
	err := v.slotTx(ctx, req.Job, req.SlotID, req.Definition, func(tx querier, cur *schedule.Record, _ bool, now time.Time) error {
		if cur != nil {
			out = *cur
			return nil
		}
		out = schedule.Record{Job: req.Job, SlotID: req.SlotID, SlotTime: req.SlotTime, State: req.State,
			Node: req.Node, Error: scheddriver.CutError(req.Reason), Finished: now}
		wrote = true
		return v.put(ctx, tx, out)
	})
	if err != nil {
		return schedule.Record{}, false, v.fail(ctx, "mark slot "+req.SlotID, err)
	}
	return out, wrote, nil
}

func (v schedules) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Record{}, err
	}
	if err := scheddriver.ValidateID(id); err != nil {
		return schedule.Record{}, err
	}
	rs, err := v.query(ctx, job, v.s.schedQ().one, job, id)
	if err != nil {
		return schedule.Record{}, err
	}
	if len(rs) == 0 {
		return schedule.Record{}, fmt.Errorf("pgstore: slot %s of %q: %w", id, job, schedule.ErrNotFound)
	}
	return rs[0], nil
}

func (v schedules) query(ctx context.Context, job, q string, args ...any) ([]schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	var out []schedule.Record
	err := v.s.db.query(ctx, q, args, func(scan func(dest ...any) error) error {
		r, err := schedScan(scan)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, v.fail(ctx, "query slots of "+job, err)
	}
	return out, nil
}

func schedLimit(limit int) any {
	if limit <= 0 {
		return nil // LIMIT NULL: no limit
	}
	return limit
}

func (v schedules) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	return v.query(ctx, job, v.s.schedQ().slots, job, from, to, schedLimit(limit))
}

func (v schedules) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	return v.query(ctx, job, v.s.schedQ().unfinished, job, schedLimit(limit))
}

func (v schedules) Last(ctx context.Context, job string) (time.Time, bool, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return time.Time{}, false, err
	}
	var t pgtype.Timestamptz
	if err := v.s.db.queryRow(ctx, v.s.schedQ().last, []any{job}, &t); err != nil {
		return time.Time{}, false, v.fail(ctx, "last slot of "+job, err)
	}
	return pgTime(t), t.Valid, nil
}

func (s *Store) completeSlot(ctx context.Context, tx querier, slot *schedule.Slot) error {
	if tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", schedule.ErrInvalid)
	}
	args, err := s.completeArgs(slot)
	if err != nil {
		return err
	}
	var ok bool
	err = tx.queryRow(ctx, s.schedQ().complete, args, &ok)
	return s.completeErr(ctx, slot, err)
}

// QueueCompleteSlot queues the completion of slot on the caller's batch b,
// so that the business change and the completion travel in one round
// trip: queue the business statements and the completion on one batch and
// send it with pool.SendBatch (the batch runs in one implicit transaction)
// or tx.SendBatch. The completion is the statement of CompleteSlot; a
// refusal raises an error inside the database, which aborts the whole
// batch's transaction, so no business change of the batch lands; the
// error that BatchResults.Close (or the caller's Exec/QueryRow on the
// results) returns then wraps schedule.ErrCompleted or schedule.ErrStale
// and lease.ErrNotHeld. Bad input is reported here and queues nothing.
func (s *Store) QueueCompleteSlot(b *pgx.Batch, slot *schedule.Slot) error {
	if b == nil {
		return fmt.Errorf("%w: pgstore: nil batch", schedule.ErrInvalid)
	}
	args, err := s.completeArgs(slot)
	if err != nil {
		return err
	}
	b.Queue(s.schedQ().complete, args...).QueryRow(func(row pgx.Row) error {
		var ok bool
		return s.completeErr(context.Background(), slot, row.Scan(&ok))
	})
	return nil
}

func (s *Store) completeArgs(slot *schedule.Slot) ([]any, error) {
	if slot == nil || slot.Lease() == nil {
		return nil, fmt.Errorf("%w: pgstore: nil slot or a slot without a claim", schedule.ErrInvalid)
	}
	if err := scheddriver.ValidateName(slot.Job); err != nil {
		return nil, err
	}
	if err := scheddriver.ValidateID(slot.ID); err != nil {
		return nil, err
	}
	l := slot.Lease()
	if l.Fence() == 0 || l.Fence() > 1<<63-1 {
		return nil, fmt.Errorf("%w: pgstore: fence %d out of range", schedule.ErrInvalid, l.Fence())
	}
	if err := pgToken(l.Token().Reveal()); err != nil {
		return nil, err
	}
	return []any{l.Key(), l.Token().Reveal(), int64(l.Fence()), slot.Job, slot.ID}, nil
}

// completeErr classifies the result of the completion statement.
func (s *Store) completeErr(ctx context.Context, slot *schedule.Slot, err error) error {
	if err == nil {
		return nil
	}
	if code := sqlState(err); code != "" {
		switch code {
		case "TS002":
			return fmt.Errorf("pgstore: slot %s of %q: %w", slot.ID, slot.Job, schedule.ErrCompleted)
		case "TS001":
			return fmt.Errorf("pgstore: slot %s of %q: the claim with fence %d is not current: %w (%w)",
				slot.ID, slot.Job, slot.Fence, lease.ErrNotHeld, fence.ErrStale)
		}
	}
	return schedules{s}.fail(ctx, "complete slot "+slot.ID, err)
}
