package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// Record states in the <prefix>idempotency table.
const (
	idemRunning  = 1
	idemDone     = 2
	idemReleased = 3
)

// idemSavepoint is the savepoint the transactional form marks after its
// claim.
const idemSavepoint = "tenure_idempotency"

type idemQueries struct {
	get, upsert, reclaim, renew, complete string
	completed, release, purge             string
}

func idemSQL(prefix string) idemQueries {
	r := strings.NewReplacer("$T", `"`+prefix+`idempotency"`, "$I", `"`+prefix+`idempotency_expires"`)
	const cols = `fingerprint, token, fence, state, claim_us, expires_us, failed, message, value`
	return idemQueries{
		get: r.Replace(`SELECT ` + cols + ` FROM $T WHERE scope = ?1 AND "key" = ?2`),
		// ?1 scope, ?2 key, ?3 fingerprint, ?4 token, ?5 fence, ?6 claim
		// until, ?7 expires. A new claim replaces whatever was there (the
		// caller holds the write lock and decided so).
		upsert: r.Replace(`INSERT INTO $T (scope, "key", ` + cols + `)
			VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, 0, NULL, NULL)
			ON CONFLICT (scope, "key") DO UPDATE SET
				fingerprint = excluded.fingerprint, token = excluded.token, fence = excluded.fence,
				state = 1, claim_us = excluded.claim_us, expires_us = excluded.expires_us,
				failed = 0, message = NULL, value = NULL`),
		// ?1 scope, ?2 key, ?3 claim until: the same token claims again.
		reclaim: r.Replace(`UPDATE $T SET claim_us = ?3, expires_us = max(expires_us, ?3)
			WHERE scope = ?1 AND "key" = ?2`),
		// ?1 scope, ?2 key, ?3 token, ?4 fence, ?5 now, ?6 claim until.
		renew: r.Replace(`UPDATE $T SET claim_us = ?6, expires_us = max(expires_us, ?6)
			WHERE scope = ?1 AND "key" = ?2 AND token = ?3 AND fence = ?4 AND state = 1 AND claim_us > ?5`),
		// ?1 scope, ?2 key, ?3 token, ?4 fence, ?5 expires, ?6 failed,
		// ?7 message, ?8 value.
		complete: r.Replace(`UPDATE $T SET state = 2, claim_us = NULL, expires_us = ?5,
				failed = ?6, message = ?7, value = ?8
			WHERE scope = ?1 AND "key" = ?2 AND token = ?3 AND fence = ?4 AND state = 1`),
		completed: r.Replace(`SELECT 1 FROM $T
			WHERE scope = ?1 AND "key" = ?2 AND token = ?3 AND fence = ?4 AND state = 2`),
		// ?1 scope, ?2 key, ?3 token. The row stays, with its fence.
		release: r.Replace(`UPDATE $T SET state = 3, token = NULL, claim_us = NULL, value = NULL, message = NULL
			WHERE scope = ?1 AND "key" = ?2 AND token = ?3 AND state = 1`),
		// ?1 now.
		purge: r.Replace(`DELETE FROM $T WHERE expires_us <= ?1 AND (claim_us IS NULL OR claim_us <= ?1)`),
	}
}

func (s *Store) idemQueries() *idemQueries {
	return s.view("idempotency", func() any {
		q := idemSQL(s.q.prefix)
		return &q
	}).(*idemQueries)
}

// Idempotency returns the store's idempotency.Store view, on the table
// <prefix>idempotency. Every write is one transaction that holds SQLite's
// write lock before it reads the store's clock (Options.Clock), so the
// record's state is read and changed in one atomic step; replays of a
// completed record are answered by a read without the lock. Rows past
// their retention are ignored by reads and overwritten by the next claim;
// [Store.PurgeIdempotency] deletes them. Released rows keep their fence, so
// the next claim's fence follows it.
func (s *Store) Idempotency() idempotency.Store { return idemView{s, s.idemQueries()} }

// PurgeIdempotency deletes the records whose retention ended (store clock)
// and returns how many. Run it now and then to reclaim space; correctness
// never depends on it.
func (s *Store) PurgeIdempotency(ctx context.Context) (int, error) {
	v := idemView{s, s.idemQueries()}
	var n int64
	err := v.write(ctx, "purge", func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, v.q.purge, now)
		if err != nil {
			return idemUnavailable("purge", err)
		}
		n, err = res.RowsAffected()
		return idemErr("purge", err)
	})
	return int(n), err
}

type idemView struct {
	s *Store
	q *idemQueries
}

func idemUnavailable(op string, err error) error {
	return fmt.Errorf("%w: sqlitestore: idempotency %s: %w", idempotency.ErrUnavailable, op, err)
}

// idemErr wraps a database error (nil stays nil); a transaction that has
// already ended is the caller's mistake, anything else the store's.
func idemErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("sqlitestore: idempotency %s: %w", op, err)
	}
	return idemUnavailable(op, err)
}

// write runs fn in a write transaction (see Store.writeTx), with database
// errors wrapped by idemUnavailable.
func (v idemView) write(ctx context.Context, op string, fn func(tx *sql.Tx, now int64) error) error {
	return v.s.writeTx(ctx, opLane(op), func(err error) error { return idemUnavailable(op, err) }, fn)
}

// idemRow is a row of the table.
type idemRow struct {
	fp       string
	token    sql.NullString
	fence    int64
	state    int
	claimUS  sql.NullInt64
	expires  int64
	failed   bool
	message  sql.NullString
	value    []byte
	notFound bool
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (v idemView) get(ctx context.Context, q queryer, id idempotency.ID) (idemRow, error) {
	var r idemRow
	err := q.QueryRowContext(ctx, v.q.get, id.Scope, id.Key).Scan(
		&r.fp, &r.token, &r.fence, &r.state, &r.claimUS, &r.expires, &r.failed, &r.message, &r.value)
	if errors.Is(err, sql.ErrNoRows) {
		return idemRow{notFound: true}, nil
	}
	return r, err
}

func (r idemRow) live(now int64) bool {
	return !r.notFound && r.state != idemReleased && r.expires > now
}

func (r idemRow) outcome() idempotency.Outcome {
	return idempotency.Outcome{Value: r.value, Failed: r.failed, Message: r.message.String}
}

// begin answers b inside tx, which holds the write lock; now was read
// under it.
func (v idemView) begin(ctx context.Context, tx *sql.Tx, b driver.Begin, now int64) (driver.Begun, error) {
	r, err := v.get(ctx, tx, b.ID)
	if err != nil {
		return driver.Begun{}, idemErr("begin", err)
	}
	ttl := micros(b.ClaimTTL)
	claim := func(last int64) (driver.Begun, error) {
		f := driver.NextFence(uint64(max(last, 0)), time.UnixMicro(now))
		_, err := tx.ExecContext(ctx, v.q.upsert, b.Scope, b.Key, b.Fingerprint, b.Token.Reveal(), int64(f),
			now+ttl, now+max(ttl, micros(b.Retention)))
		if err != nil {
			return driver.Begun{}, idemErr("begin", err)
		}
		return driver.Begun{State: driver.Claimed, Fence: f, TTL: time.Duration(ttl) * time.Microsecond}, nil
	}
	switch {
	case !r.live(now):
		return claim(r.fence)
	case r.fp != b.Fingerprint:
		return driver.Begun{State: driver.Mismatch}, nil
	case r.state == idemDone:
		return driver.Begun{State: driver.Completed, Outcome: r.outcome()}, nil
	case r.token.String == b.Token.Reveal():
		if _, err := tx.ExecContext(ctx, v.q.reclaim, b.Scope, b.Key, now+ttl); err != nil {
			return driver.Begun{}, idemErr("begin", err)
		}
		return driver.Begun{State: driver.Claimed, Fence: uint64(r.fence), TTL: time.Duration(ttl) * time.Microsecond}, nil
	case r.claimUS.Int64 > now:
		return driver.Begun{State: driver.InProgress, TTL: time.Duration(r.claimUS.Int64-now) * time.Microsecond}, nil
	case b.Takeover:
		return claim(r.fence)
	}
	return driver.Begun{State: driver.Abandoned, Fence: uint64(r.fence)}, nil
}

func (v idemView) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	if err := driver.ValidateBegin(b); err != nil {
		return driver.Begun{}, err
	}
	// A completed record changes only by its expiry: answer a replay or a
	// mismatch from a read, without the write lock.
	r, err := v.get(ctx, v.s.db, b.ID)
	if err != nil {
		return driver.Begun{}, idemUnavailable("begin", err)
	}
	if r.live(v.s.nowUS()) && r.state == idemDone {
		if r.fp != b.Fingerprint {
			return driver.Begun{State: driver.Mismatch}, nil
		}
		return driver.Begun{State: driver.Completed, Outcome: r.outcome()}, nil
	}
	var got driver.Begun
	err = v.write(ctx, "begin", func(tx *sql.Tx, now int64) (err error) {
		got, err = v.begin(ctx, tx, b, now)
		return err
	})
	return got, err
}

func (v idemView) renew(ctx context.Context, ex execer, id idempotency.ID, token string, fence uint64, ttl time.Duration, now int64) error {
	res, err := ex.ExecContext(ctx, v.q.renew, id.Scope, id.Key, token, int64(fence), now, now+micros(ttl))
	if err != nil {
		return idemErr("renew", err)
	}
	return lostUnless(res, "renew")
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func lostUnless(res sql.Result, op string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return idemUnavailable(op, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: sqlitestore: idempotency %s", idempotency.ErrClaimLost, op)
	}
	return nil
}

func (v idemView) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateClaimTTL(ttl); err != nil {
		return err
	}
	return v.write(ctx, "renew", func(tx *sql.Tx, now int64) error {
		return v.renew(ctx, tx, id, token, fence, ttl, now)
	})
}

func (v idemView) complete(ctx context.Context, ex execer, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration, now int64) error {
	value := out.Value
	if value == nil {
		value = []byte{}
	}
	res, err := ex.ExecContext(ctx, v.q.complete, id.Scope, id.Key, token, int64(fence),
		now+micros(retention), out.Failed, driver.CleanMessage(out.Message), value)
	if err != nil {
		return idemErr("complete", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return idemUnavailable("complete", err)
	}
	if n == 1 {
		return nil
	}
	// Already completed by this very claim (a repeat): fine.
	var one int
	err = ex.QueryRowContext(ctx, v.q.completed, id.Scope, id.Key, token, int64(fence)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: sqlitestore: idempotency complete", idempotency.ErrClaimLost)
	}
	return idemErr("complete", err)
}

func validateComplete(id idempotency.ID, token string, fence uint64, retention time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	return driver.ValidateRetention(retention)
}

func (v idemView) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := validateComplete(id, token, fence, retention); err != nil {
		return err
	}
	return v.write(ctx, "complete", func(tx *sql.Tx, now int64) error {
		return v.complete(ctx, tx, id, token, fence, out, retention, now)
	})
}

func validateRelease(id idempotency.ID, token string) error {
	if err := driver.ValidateID(id); err != nil {
		return err
	}
	return driver.ValidateToken(token)
}

func (v idemView) release(ctx context.Context, ex execer, id idempotency.ID, token string) error {
	res, err := ex.ExecContext(ctx, v.q.release, id.Scope, id.Key, token)
	if err != nil {
		return idemErr("release", err)
	}
	return lostUnless(res, "release")
}

func (v idemView) Release(ctx context.Context, id idempotency.ID, token string) error {
	if err := validateRelease(id, token); err != nil {
		return err
	}
	return v.write(ctx, "release", func(tx *sql.Tx, _ int64) error { return v.release(ctx, tx, id, token) })
}

func (v idemView) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	if err := driver.ValidateID(id); err != nil {
		return idempotency.Record{}, err
	}
	r, err := v.get(ctx, v.s.db, id)
	if err != nil {
		return idempotency.Record{}, idemUnavailable("inspect", err)
	}
	now := v.s.nowUS()
	rec := idempotency.Record{ID: id}
	if !r.live(now) {
		return rec, nil
	}
	rec.Exists = true
	rec.Completed = r.state == idemDone
	rec.Fingerprint = r.fp
	rec.Fence = uint64(r.fence)
	if !rec.Completed && r.claimUS.Int64 > now {
		rec.ClaimTTL = time.Duration(r.claimUS.Int64-now) * time.Microsecond
	}
	rec.Expires = time.Duration(r.expires-now) * time.Microsecond
	if rec.Completed {
		rec.Outcome = r.outcome()
	}
	return rec, nil
}

// idemTx is the transactional form on the caller's transaction.
type idemTx struct {
	v  idemView
	tx *sql.Tx
}

func (t idemTx) Claim(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	if err := driver.ValidateBegin(b); err != nil {
		return driver.Begun{}, err
	}
	if t.tx == nil {
		return driver.Begun{}, fmt.Errorf("%w: sqlitestore: nil transaction", idempotency.ErrInvalid)
	}
	// Take the write lock before reading the clock or the row (a
	// no-op where the transaction began IMMEDIATE).
	if _, err := t.tx.ExecContext(ctx, t.v.s.q.lock); err != nil {
		return driver.Begun{}, idemErr("claim", err)
	}
	got, err := t.v.begin(ctx, t.tx, b, t.v.s.nowUS())
	if err != nil || got.State != driver.Claimed {
		return got, err
	}
	if _, err := t.tx.ExecContext(ctx, `SAVEPOINT `+idemSavepoint); err != nil {
		return driver.Begun{}, idemErr("claim", err)
	}
	return got, nil
}

func (t idemTx) Undo(ctx context.Context) error {
	_, err := t.tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT `+idemSavepoint)
	return idemErr("undo", err)
}

func (t idemTx) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := validateComplete(id, token, fence, retention); err != nil {
		return err
	}
	return t.v.complete(ctx, t.tx, id, token, fence, out, retention, t.v.s.nowUS())
}

func (t idemTx) Release(ctx context.Context, id idempotency.ID, token string) error {
	if err := validateRelease(id, token); err != nil {
		return err
	}
	return t.v.release(ctx, t.tx, id, token)
}
