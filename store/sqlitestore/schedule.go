package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// schedQueries are the statements of the schedule view.
type schedQueries struct {
	get, upsert, inLedger, addLedger  string
	slots, unfinished, last, markDone string
	history, putHistory, def, putDef  string
}

func (s *Store) schedQ() *schedQueries {
	return s.view("schedule", func() any {
		p := s.q.prefix
		r := strings.NewReplacer("$S", `"`+p+`schedule_slots"`, "$G", `"`+p+`schedule_ledger"`,
			"$A", `"`+p+`schedule_attempts"`, "$J", `"`+p+`schedule_jobs"`)
		const cols = `job, slot_id, slot_us, state, node, attempts, fence, started_us, finished_us, error, retry_us`
		// The columns read: the record's and its history.
		sel := `SELECT ` + cols + `, (SELECT history FROM $A a WHERE a.job = s.job AND a.slot_id = s.slot_id) FROM $S s`
		return &schedQueries{
			get: r.Replace(sel + ` WHERE job = ?1 AND slot_id = ?2`),
			upsert: r.Replace(`INSERT INTO $S (` + cols + `) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
				ON CONFLICT (job, slot_id) DO UPDATE SET state = excluded.state, node = excluded.node,
					attempts = excluded.attempts, fence = excluded.fence, started_us = excluded.started_us,
					finished_us = excluded.finished_us, error = excluded.error, retry_us = excluded.retry_us`),
			inLedger:  r.Replace(`SELECT 1 FROM $G WHERE job = ?1 AND slot_id = ?2`),
			addLedger: r.Replace(`INSERT INTO $G (job, slot_id, fence, completed_us) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING`),
			slots: r.Replace(sel + ` WHERE job = ?1 AND slot_us >= ?2 AND slot_us < ?3
				ORDER BY slot_us LIMIT ?4`),
			unfinished: r.Replace(sel + ` WHERE job = ?1
				AND (state = 'running' OR (state = 'failed' AND retry_us IS NOT NULL)) ORDER BY slot_us LIMIT ?2`),
			last: r.Replace(`SELECT max(slot_us) FROM $S WHERE job = ?1`),
			// ?1 job, ?2 slot, ?3 slot time, ?4 fence, ?5 attempt, ?6 now.
			markDone: r.Replace(`INSERT INTO $S (` + cols + `) VALUES (?1, ?2, ?3, 'done', '', ?5, ?4, NULL, ?6, '', NULL)
				ON CONFLICT (job, slot_id) DO UPDATE SET state = 'done', finished_us = ?6, error = '', retry_us = NULL`),
			history: r.Replace(`SELECT history FROM $A WHERE job = ?1 AND slot_id = ?2`),
			putHistory: r.Replace(`INSERT INTO $A (job, slot_id, history) VALUES (?1, ?2, ?3)
				ON CONFLICT (job, slot_id) DO UPDATE SET history = excluded.history`),
			def: r.Replace(`SELECT fingerprint, spec, node, registered_us FROM $J WHERE job = ?1`),
			putDef: r.Replace(`INSERT INTO $J (job, fingerprint, spec, node, registered_us) VALUES (?1, ?2, ?3, ?4, ?5)
				ON CONFLICT (job) DO UPDATE SET fingerprint = excluded.fingerprint, spec = excluded.spec,
					node = excluded.node, registered_us = excluded.registered_us`),
		}
	}).(*schedQueries)
}

// Schedules returns the store's schedule.Store view: slot records in
// <prefix>schedule_slots, the completion ledger in <prefix>schedule_ledger,
// claims on the store's lease table. Every write is one transaction under
// SQLite's write lock, judged on the store's clock read after the lock was
// taken.
func (s *Store) Schedules() schedule.Store { return schedules{s} }

type schedules struct{ s *Store }

func (v schedules) Claims() lease.Store { return v.s.Leases() }

func (v schedules) Now(context.Context) (time.Time, error) {
	return time.UnixMicro(v.s.nowUS()), nil
}

func schedFromUS(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return time.UnixMicro(us.Int64)
}

func schedToUS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

type schedScanner interface{ Scan(dest ...any) error }

func schedScan(row schedScanner) (schedule.Record, error) {
	var (
		r                   schedule.Record
		slotUS, fence       int64
		state               string
		started, fin, retry sql.NullInt64
		hist                sql.NullString
	)
	err := row.Scan(&r.Job, &r.SlotID, &slotUS, &state, &r.Node, &r.Attempts, &fence, &started, &fin, &r.Error, &retry, &hist)
	if err != nil {
		return schedule.Record{}, err
	}
	if r.History, err = scheddriver.DecodeHistory(hist.String); err != nil {
		return schedule.Record{}, err
	}
	r.SlotTime, r.State, r.Fence = time.UnixMicro(slotUS), schedule.State(state), uint64(fence)
	r.Started, r.Finished, r.RetryAt = schedFromUS(started), schedFromUS(fin), schedFromUS(retry)
	return r, nil
}

// current reads a slot's record and whether the ledger has it, in tx (or
// on the database, outside a transaction).
func (v schedules) current(ctx context.Context, tx querier, job, id string) (*schedule.Record, bool, error) {
	q := v.s.schedQ()
	var cur *schedule.Record
	r, err := schedScan(tx.QueryRowContext(ctx, q.get, job, id))
	switch {
	case err == nil:
		cur = &r
	case !errors.Is(err, sql.ErrNoRows):
		return nil, false, err
	}
	var one int
	err = tx.QueryRowContext(ctx, q.inLedger, job, id).Scan(&one)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, false, err
	}
	return cur, err == nil, nil
}

func (v schedules) put(ctx context.Context, tx *sql.Tx, r schedule.Record) error {
	_, err := tx.ExecContext(ctx, v.s.schedQ().upsert, r.Job, r.SlotID, r.SlotTime.UnixMicro(), string(r.State), r.Node,
		r.Attempts, int64(r.Fence), schedToUS(r.Started), schedToUS(r.Finished), r.Error, schedToUS(r.RetryAt))
	if err != nil || r.History == nil {
		return err
	}
	_, err = tx.ExecContext(ctx, v.s.schedQ().putHistory, r.Job, r.SlotID, scheddriver.EncodeHistory(r.History))
	return err
}

// definition reads job's registered fingerprint ("" if none) in tx.
func (v schedules) fingerprint(ctx context.Context, tx *sql.Tx, job string) (string, error) {
	d, err := v.readDef(ctx, tx, job)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return d.Fingerprint, err
}

func (v schedules) readDef(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, job string) (schedule.Definition, error) {
	d := schedule.Definition{Job: job}
	var us int64
	if err := q.QueryRowContext(ctx, v.s.schedQ().def, job).Scan(&d.Fingerprint, &d.Spec, &d.Node, &us); err != nil {
		return schedule.Definition{}, err
	}
	d.Registered = time.UnixMicro(us)
	return d, nil
}

func (v schedules) Register(ctx context.Context, req scheddriver.RegisterRequest) (schedule.Definition, error) {
	if err := req.Validate(); err != nil {
		return schedule.Definition{}, err
	}
	var prev schedule.Definition
	key := "schedule/" + req.Job
	err := v.schedWrite(ctx, "register", key, func(tx *sql.Tx, now time.Time) error {
		d, err := v.readDef(ctx, tx, req.Job)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return schedDBErr("register", key, err)
		default:
			prev = d
		}
		if prev.Fingerprint == req.Fingerprint {
			return nil
		}
		if _, err := tx.ExecContext(ctx, v.s.schedQ().putDef, req.Job, req.Fingerprint, scheddriver.CutError(req.Spec), req.Node, now.UnixMicro()); err != nil {
			return schedDBErr("register", key, err)
		}
		return nil
	})
	return prev, v.wrapUnavailable(err)
}

func (v schedules) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Definition{}, err
	}
	d, err := v.readDef(ctx, v.s.db, job)
	if errors.Is(err, sql.ErrNoRows) {
		return schedule.Definition{}, fmt.Errorf("sqlitestore: job %q: no registered definition: %w", job, schedule.ErrNotFound)
	}
	if err != nil {
		return schedule.Definition{}, schedDBErr("definition", job, err)
	}
	return d, nil
}

// schedWrite runs fn in a store write transaction; database errors wrap
// schedule.ErrUnavailable (and lease.ErrUnavailable).
func (v schedules) schedWrite(ctx context.Context, op, key string, fn func(tx *sql.Tx, now time.Time) error) error {
	return v.s.write(ctx, op, key, func(tx *sql.Tx, now int64) error {
		return fn(tx, time.UnixMicro(now))
	})
}

func schedDBErr(op, key string, err error) error {
	return fmt.Errorf("%w: %w", schedule.ErrUnavailable, unavailable(op, key, err))
}

func (v schedules) Begin(ctx context.Context, req scheddriver.BeginRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	var out schedule.Record
	key := scheddriver.ClaimKey(req.Job, req.SlotID)
	err := v.schedWrite(ctx, "begin", key, func(tx *sql.Tx, now time.Time) error {
		if err := v.checkDef(ctx, tx, req.Job, req.Definition); err != nil {
			return err
		}
		cur, completed, err := v.current(ctx, tx, req.Job, req.SlotID)
		if err != nil {
			return schedDBErr("begin", key, err)
		}
		r, write, err := scheddriver.ApplyBegin(cur, completed, req, now)
		if err != nil {
			return err
		}
		if write {
			if err := v.put(ctx, tx, r); err != nil {
				return schedDBErr("begin", key, err)
			}
		}
		out = r
		return nil
	})
	return out, v.wrapUnavailable(err)
}

// checkDef refuses a request made under a definition that is not the
// job's registered one.
func (v schedules) checkDef(ctx context.Context, tx *sql.Tx, job, fp string) error {
	if fp == "" {
		return nil
	}
	cur, err := v.fingerprint(ctx, tx, job)
	if err != nil {
		return schedDBErr("check definition", job, err)
	}
	return scheddriver.ApplyDefinition(job, cur, fp)
}

// wrapUnavailable makes the store's own ErrUnavailable errors (its write
// queue, BEGIN, COMMIT) schedule.ErrUnavailable too.
func (v schedules) wrapUnavailable(err error) error {
	if err != nil && errors.Is(err, lease.ErrUnavailable) && !errors.Is(err, schedule.ErrUnavailable) {
		return fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	return err
}

func (v schedules) Finish(ctx context.Context, req scheddriver.FinishRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	var out schedule.Record
	key := scheddriver.ClaimKey(req.Job, req.SlotID)
	// A slot completed in the handler's transaction (CompleteSlot) is done
	// for good: read, that needs no write transaction.
	if cur, _, err := v.current(ctx, v.s.db, req.Job, req.SlotID); err != nil {
		return schedule.Record{}, schedDBErr("finish", key, err)
	} else if cur != nil && cur.State == schedule.Done {
		return *cur, nil
	}
	err := v.schedWrite(ctx, "finish", key, func(tx *sql.Tx, now time.Time) error {
		cur, _, err := v.current(ctx, tx, req.Job, req.SlotID)
		if err != nil {
			return schedDBErr("finish", key, err)
		}
		r, write, err := scheddriver.ApplyFinish(cur, req, now)
		if err != nil {
			return err
		}
		if write {
			if err := v.put(ctx, tx, r); err != nil {
				return schedDBErr("finish", key, err)
			}
			if r.State == schedule.Done {
				if _, err := tx.ExecContext(ctx, v.s.schedQ().addLedger, r.Job, r.SlotID, int64(r.Fence), now.UnixMicro()); err != nil {
					return schedDBErr("finish", key, err)
				}
			}
		}
		out = r
		return nil
	})
	return out, v.wrapUnavailable(err)
}

func (v schedules) Mark(ctx context.Context, req scheddriver.MarkRequest) (schedule.Record, bool, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, false, err
	}
	var (
		out   schedule.Record
		wrote bool
	)
	key := scheddriver.ClaimKey(req.Job, req.SlotID)
	err := v.schedWrite(ctx, "mark", key, func(tx *sql.Tx, now time.Time) error {
		if err := v.checkDef(ctx, tx, req.Job, req.Definition); err != nil {
			return err
		}
		cur, _, err := v.current(ctx, tx, req.Job, req.SlotID)
		if err != nil {
			return schedDBErr("mark", key, err)
		}
		if cur != nil {
			out = *cur
			return nil
		}
		out = schedule.Record{Job: req.Job, SlotID: req.SlotID, SlotTime: req.SlotTime, State: req.State,
			Node: req.Node, Error: scheddriver.CutError(req.Reason), Finished: now}
		wrote = true
		if err := v.put(ctx, tx, out); err != nil {
			return schedDBErr("mark", key, err)
		}
		return nil
	})
	return out, wrote, v.wrapUnavailable(err)
}

func (v schedules) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Record{}, err
	}
	if err := scheddriver.ValidateID(id); err != nil {
		return schedule.Record{}, err
	}
	r, err := schedScan(v.s.db.QueryRowContext(ctx, v.s.schedQ().get, job, id))
	if errors.Is(err, sql.ErrNoRows) {
		return schedule.Record{}, fmt.Errorf("sqlitestore: slot %s of %q: %w", id, job, schedule.ErrNotFound)
	}
	if err != nil {
		return schedule.Record{}, schedDBErr("slot", job, err)
	}
	return r, nil
}

func (v schedules) query(ctx context.Context, job, q string, args ...any) ([]schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	rows, err := v.s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, schedDBErr("query slots", job, err)
	}
	defer rows.Close()
	var out []schedule.Record
	for rows.Next() {
		r, err := schedScan(rows)
		if err != nil {
			return nil, schedDBErr("query slots", job, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, schedDBErr("query slots", job, err)
	}
	return out, nil
}

func schedLimit(limit int) int64 {
	if limit <= 0 {
		return -1 // SQLite: no limit
	}
	return int64(limit)
}

func (v schedules) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	return v.query(ctx, job, v.s.schedQ().slots, job, from.UnixMicro(), to.UnixMicro(), schedLimit(limit))
}

func (v schedules) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	return v.query(ctx, job, v.s.schedQ().unfinished, job, schedLimit(limit))
}

func (v schedules) Last(ctx context.Context, job string) (time.Time, bool, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return time.Time{}, false, err
	}
	var us sql.NullInt64
	if err := v.s.db.QueryRowContext(ctx, v.s.schedQ().last, job).Scan(&us); err != nil {
		return time.Time{}, false, schedDBErr("last slot", job, err)
	}
	return schedFromUS(us), us.Valid, nil
}

func (s *Store) completeSlot(ctx context.Context, tx *sql.Tx, slot *schedule.Slot) error {
	if slot == nil || slot.Lease() == nil {
		return fmt.Errorf("%w: sqlitestore: nil slot or a slot without a claim", schedule.ErrInvalid)
	}
	if tx == nil {
		return fmt.Errorf("%w: sqlitestore: nil transaction", schedule.ErrInvalid)
	}
	if err := scheddriver.ValidateName(slot.Job); err != nil {
		return err
	}
	if err := scheddriver.ValidateID(slot.ID); err != nil {
		return err
	}
	l := slot.Lease()
	if l.Fence() == 0 || l.Fence() > 1<<63-1 {
		return fmt.Errorf("%w: sqlitestore: fence %d out of range", schedule.ErrInvalid, l.Fence())
	}
	key := l.Key()
	q := s.schedQ()
	txErr := func(err error) error {
		return fmt.Errorf("%w: %w", schedule.ErrUnavailable, txError("complete slot", key, err))
	}
	if _, err := tx.ExecContext(ctx, s.q.lock); err != nil {
		return txErr(err)
	}
	now := s.nowUS()
	var one int
	err := tx.QueryRowContext(ctx, q.inLedger, slot.Job, slot.ID).Scan(&one)
	switch {
	case err == nil:
		return fmt.Errorf("sqlitestore: slot %s of %q: %w", slot.ID, slot.Job, schedule.ErrCompleted)
	case !errors.Is(err, sql.ErrNoRows):
		return txErr(err)
	}
	err = tx.QueryRowContext(ctx, s.q.holder, key, l.Token().Reveal(), int64(l.Fence()), now).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlitestore: slot %s of %q: the claim with fence %d is not current: %w (%w)",
			slot.ID, slot.Job, l.Fence(), lease.ErrNotHeld, fence.ErrStale)
	case err != nil:
		return txErr(err)
	}
	if _, err := tx.ExecContext(ctx, q.addLedger, slot.Job, slot.ID, int64(l.Fence()), now); err != nil {
		return txErr(err)
	}
	if _, err := tx.ExecContext(ctx, q.markDone, slot.Job, slot.ID, slot.Time.UnixMicro(), int64(l.Fence()), slot.Attempt, now); err != nil {
		return txErr(err)
	}
	var hist string
	err = tx.QueryRowContext(ctx, q.history, slot.Job, slot.ID).Scan(&hist)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return txErr(err)
	}
	h, err := scheddriver.DecodeHistory(hist)
	if err != nil {
		return txErr(err)
	}
	if _, err := tx.ExecContext(ctx, q.putHistory, slot.Job, slot.ID,
		scheddriver.EncodeHistory(scheddriver.EndAttempt(h, l.Fence(), time.UnixMicro(now), schedule.AttemptDone, ""))); err != nil {
		return txErr(err)
	}
	return nil
}
