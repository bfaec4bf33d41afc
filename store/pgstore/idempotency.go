package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/idempotency"
)

// Record states (column state).
const (
	idemRunning  = 1
	idemDone     = 2
	idemReleased = 3
)

// idemSavepoint is the savepoint the transactional form marks after its
// claim.
const idemSavepoint = "tenure_idempotency"

// idemBeginAttempts bounds how often Begin runs its statement again when a
// concurrent change of the record made one run inconclusive.
const idemBeginAttempts = 8

type idemQueries struct {
	begin, renew, complete, release, inspect, purge string
}

func idemSQL(schema string) *idemQueries {
	t := schema + ".idempotency"
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	const us = `(extract(epoch FROM c.now) * 1000000)::bigint`
	return &idemQueries{
		// $1 scope, $2 key, $3 fingerprint, $4 token, $5 claim TTL, $6
		// retention, $7 takeover. One statement, one reading of the clock:
		// cur is the record as of the statement's snapshot; unless cur is
		// a live record that answers the request, ins claims it (a new
		// row, or an update of a row that is gone, released, expired,
		// abandoned with takeover, or claimed by the same token, as
		// checked again on the newest row version). The result is ins's
		// fence when it claimed, else cur. When a concurrent transaction
		// changed the row after the snapshot, the result is inconclusive
		// (cur claimable, ins refused, or no row at all) and the client
		// runs the statement again.
		begin: `WITH c AS (SELECT clock_timestamp() AS now),
cur AS (
	SELECT r.fingerprint, r.token, r.fence, r.state, r.claim_until, r.failed, r.message, r.value,
		(r.state <> 3 AND r.expires_at > c.now) AS live
	FROM ` + t + ` AS r, c WHERE r.scope = $1 AND r.key = $2
),
ins AS (
	INSERT INTO ` + t + ` AS r (scope, key, fingerprint, token, fence, state, claim_until, expires_at, failed, message, value)
	SELECT $1, $2, $3, $4, greatest(` + us + `, 1), 1, c.now + ($5::bigint * interval '1 microsecond'),
		c.now + greatest(($5::bigint * interval '1 microsecond'), ($6::bigint * interval '1 microsecond')), false, NULL, NULL
	FROM c
	WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.live AND NOT (cur.state = 1 AND cur.fingerprint = $3
		AND (cur.token = $4 OR ($7 AND cur.claim_until <= c.now))))
	ON CONFLICT (scope, key) DO UPDATE SET
		fence = CASE WHEN r.state = 1 AND r.token = excluded.token AND r.expires_at > (SELECT now FROM c)
			THEN r.fence ELSE greatest(r.fence + 1, excluded.fence) END,
		expires_at = CASE WHEN r.state = 1 AND r.token = excluded.token AND r.expires_at > (SELECT now FROM c)
			THEN greatest(r.expires_at, excluded.claim_until) ELSE excluded.expires_at END,
		fingerprint = excluded.fingerprint, token = excluded.token, state = 1,
		claim_until = excluded.claim_until, failed = false, message = NULL, value = NULL
	WHERE r.state = 3 OR r.expires_at <= (SELECT now FROM c)
		OR (r.state = 1 AND r.fingerprint = excluded.fingerprint
			AND (r.token = excluded.token OR ($7 AND r.claim_until <= (SELECT now FROM c))))
	RETURNING r.fence
)
SELECT true, i.fence, NULL::text, NULL::text, NULL::smallint, NULL::bigint, NULL::boolean, NULL::boolean, NULL::text, NULL::bytea
FROM ins AS i
UNION ALL
SELECT false, cur.fence, cur.fingerprint, cur.token, cur.state,
	((extract(epoch FROM cur.claim_until) - extract(epoch FROM c.now)) * 1000000)::bigint,
	cur.live, cur.failed, cur.message, cur.value
FROM cur, c WHERE NOT EXISTS (SELECT 1 FROM ins)`,
		// $1 scope, $2 key, $3 token, $4 fence, $5 ttl.
		renew: clock + `UPDATE ` + t + ` AS r
SET claim_until = c.now + ($5::bigint * interval '1 microsecond'), expires_at = greatest(r.expires_at, c.now + ($5::bigint * interval '1 microsecond')) FROM c
WHERE r.scope = $1 AND r.key = $2 AND r.token = $3 AND r.fence = $4 AND r.state = 1 AND r.claim_until > c.now`,
		// $1 scope, $2 key, $3 token, $4 fence, $5 retention, $6 failed,
		// $7 message, $8 value. A record this claim already completed is
		// left as it is (a repeated completion succeeds).
		complete: clock + `UPDATE ` + t + ` AS r SET
	state = 2,
	claim_until = NULL,
	expires_at = CASE WHEN r.state = 1 THEN c.now + ($5::bigint * interval '1 microsecond') ELSE r.expires_at END,
	failed = CASE WHEN r.state = 1 THEN $6 ELSE r.failed END,
	message = CASE WHEN r.state = 1 THEN $7 ELSE r.message END,
	value = CASE WHEN r.state = 1 THEN $8 ELSE r.value END
FROM c
WHERE r.scope = $1 AND r.key = $2 AND r.token = $3 AND r.fence = $4 AND r.state IN (1, 2)`,
		// $1 scope, $2 key, $3 token. The row stays, with its fence.
		release: `UPDATE ` + t + ` SET state = 3, token = NULL, claim_until = NULL, message = NULL, value = NULL
WHERE scope = $1 AND key = $2 AND token = $3 AND state = 1`,
		inspect: clock + `SELECT r.fingerprint, r.fence, r.state,
	coalesce(((extract(epoch FROM r.claim_until) - extract(epoch FROM c.now)) * 1000000)::bigint, 0),
	((extract(epoch FROM r.expires_at) - extract(epoch FROM c.now)) * 1000000)::bigint,
	r.failed, r.message, r.value
FROM ` + t + ` AS r, c WHERE r.scope = $1 AND r.key = $2 AND r.state <> 3 AND r.expires_at > c.now`,
		purge: clock + `DELETE FROM ` + t + ` AS r USING c
WHERE r.expires_at <= c.now AND (r.claim_until IS NULL OR r.claim_until <= c.now)`,
	}
}

func (s *Store) idemQueries() *idemQueries {
	return s.view("idempotency", func() any { return idemSQL(pgx.Identifier{s.schema}.Sanitize()) }).(*idemQueries)
}

// Idempotency returns the Store's idempotency.Store view, on the table
// idempotency of the Store's schema (created by Migrate). Every call is
// one SQL statement judged on the server's clock_timestamp(); Begin may run
// its statement again when a concurrent transaction changed the record
// while it ran. Rows past their retention are ignored by reads and
// overwritten by the next claim; [Store.PurgeIdempotency] deletes them.
// Released rows keep their fence, so the next claim's fence follows it;
// a new row's fence is the clock in microseconds.
func (s *Store) Idempotency() idempotency.Store { return idemView{s, s.idemQueries()} }

// PurgeIdempotency deletes the records whose retention ended (server
// clock) and returns how many. Run it now and then to reclaim space;
// correctness never depends on it.
func (s *Store) PurgeIdempotency(ctx context.Context) (int64, error) {
	n, err := s.db.exec(ctx, s.idemQueries().purge)
	if err != nil {
		return 0, s.idemWrap(ctx, "purge", err)
	}
	return n, nil
}

type idemView struct {
	s *Store
	q *idemQueries
}

// idemWrap classifies err like wrap, with idempotency.ErrUnavailable.
func (s *Store) idemWrap(ctx context.Context, op string, err error) error {
	if unavailable(ctx, err) {
		return fmt.Errorf("pgstore: idempotency %s: %w: %w", op, idempotency.ErrUnavailable, err)
	}
	return s.wrap(ctx, "idempotency "+op, err)
}

func (v idemView) check() error {
	return nil
}

// beginRow is one run of the begin statement.
type beginRow struct {
	claimed bool
	fence   int64
	fp      *string
	token   *string
	state   *int16
	claimUS *int64
	live    *bool
	failed  *bool
	message *string
	value   []byte
}

// answer turns a run's row into a Begun; ok is false when the run was
// inconclusive.
func (r beginRow) answer(b driver.Begin) (driver.Begun, bool) {
	if r.claimed {
		return driver.Begun{State: driver.Claimed, Fence: uint64(r.fence), TTL: grantTTL(b.ClaimTTL)}, true
	}
	if r.live == nil || !*r.live || r.fp == nil || r.state == nil {
		return driver.Begun{}, false
	}
	left := int64(0)
	if r.claimUS != nil {
		left = *r.claimUS
	}
	switch {
	case *r.fp != b.Fingerprint:
		return driver.Begun{State: driver.Mismatch}, true
	case *r.state == idemDone:
		out := idempotency.Outcome{Value: r.value}
		if r.failed != nil {
			out.Failed = *r.failed
		}
		if r.message != nil {
			out.Message = *r.message
		}
		return driver.Begun{State: driver.Completed, Outcome: out}, true
	case r.token != nil && *r.token == b.Token.Reveal():
		return driver.Begun{}, false // claimable: the claim lost a race
	case left > 0:
		return driver.Begun{State: driver.InProgress, TTL: time.Duration(left) * time.Microsecond}, true
	case b.Takeover:
		return driver.Begun{}, false
	}
	return driver.Begun{State: driver.Abandoned, Fence: uint64(r.fence)}, true
}

// runBegin runs the begin statement once on q (and, with savepoint, the
// savepoint after it, in the same round trip where q can).
func (v idemView) runBegin(ctx context.Context, q querier, b driver.Begin, savepoint bool) (beginRow, bool, error) {
	args := []any{b.Scope, b.Key, b.Fingerprint, b.Token.Reveal(), b.ClaimTTL, b.Retention, b.Takeover}
	var r beginRow
	dest := []any{&r.claimed, &r.fence, &r.fp, &r.token, &r.state, &r.claimUS, &r.live, &r.failed, &r.message, &r.value}
	var err error
	if savepoint {
		err = q.pipeline(ctx, stmt{sql: v.q.begin, args: args, dest: dest}, stmt{sql: `SAVEPOINT ` + idemSavepoint})
	} else {
		err = q.queryRow(ctx, v.q.begin, args, dest...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return beginRow{}, false, nil
	}
	if err != nil {
		return beginRow{}, false, err
	}
	return r, true, nil
}

// begin runs the begin statement until it is conclusive. In a transaction
// (tx != nil), the savepoint is marked after the claim.
func (v idemView) begin(ctx context.Context, tx querier, b driver.Begin) (driver.Begun, error) {
	if err := driver.ValidateBegin(b); err != nil {
		return driver.Begun{}, err
	}
	if err := v.check(); err != nil {
		return driver.Begun{}, err
	}
	for attempt := 1; attempt <= idemBeginAttempts; attempt++ {
		// The first run in a transaction sends the savepoint along; it
		// only counts if that run claimed.
		q := tx
		if q == nil {
			q = v.s.db
		}
		r, found, err := v.runBegin(ctx, q, b, tx != nil && attempt == 1)
		if err != nil {
			return driver.Begun{}, v.s.idemWrap(ctx, "begin", err)
		}
		if !found {
			continue
		}
		got, ok := r.answer(b)
		if !ok {
			continue
		}
		if tx != nil && got.State == driver.Claimed && attempt > 1 {
			if _, err := tx.exec(ctx, `SAVEPOINT `+idemSavepoint); err != nil {
				return driver.Begun{}, v.s.idemWrap(ctx, "begin", err)
			}
		}
		return got, nil
	}
	return driver.Begun{}, fmt.Errorf("pgstore: idempotency begin: the record of key %q kept changing during %d attempts", b.Key, idemBeginAttempts)
}

func (v idemView) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	return v.begin(ctx, nil, b)
}

func (v idemView) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateClaimTTL(ttl); err != nil {
		return err
	}
	if err := v.check(); err != nil {
		return err
	}
	n, err := v.s.db.exec(ctx, v.q.renew, id.Scope, id.Key, token, int64(fence), grantTTL(ttl))
	if err != nil {
		return v.s.idemWrap(ctx, "renew", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: pgstore: renew", idempotency.ErrClaimLost)
	}
	return nil
}

func (v idemView) complete(ctx context.Context, tx querier, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	if err := v.check(); err != nil {
		return err
	}
	value := out.Value
	if value == nil {
		value = []byte{}
	}
	args := []any{id.Scope, id.Key, token, int64(fence), grantTTL(retention), out.Failed, driver.CleanMessage(out.Message), value}
	q := tx
	if q == nil {
		q = v.s.db
	}
	n, err := q.exec(ctx, v.q.complete, args...)
	if err != nil {
		return v.s.idemWrap(ctx, "complete", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: pgstore: complete", idempotency.ErrClaimLost)
	}
	return nil
}

func (v idemView) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	return v.complete(ctx, nil, id, token, fence, out, retention)
}

func (v idemView) release(ctx context.Context, tx querier, id idempotency.ID, token string) error {
	if err := driver.ValidateID(id); err != nil {
		return err
	}
	if err := driver.ValidateToken(token); err != nil {
		return err
	}
	if err := v.check(); err != nil {
		return err
	}
	q := tx
	if q == nil {
		q = v.s.db
	}
	n, err := q.exec(ctx, v.q.release, id.Scope, id.Key, token)
	if err != nil {
		return v.s.idemWrap(ctx, "release", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: pgstore: release", idempotency.ErrClaimLost)
	}
	return nil
}

func (v idemView) Release(ctx context.Context, id idempotency.ID, token string) error {
	return v.release(ctx, nil, id, token)
}

func (v idemView) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	if err := driver.ValidateID(id); err != nil {
		return idempotency.Record{}, err
	}
	if err := v.check(); err != nil {
		return idempotency.Record{}, err
	}
	rec := idempotency.Record{ID: id}
	var (
		fence           int64
		state           int16
		claimUS, leftUS int64
		message         *string
	)
	err := v.s.db.queryRow(ctx, v.q.inspect, []any{id.Scope, id.Key},
		&rec.Fingerprint, &fence, &state, &claimUS, &leftUS, &rec.Outcome.Failed, &message, &rec.Outcome.Value)
	if errors.Is(err, sql.ErrNoRows) {
		return idempotency.Record{ID: id}, nil
	}
	if err != nil {
		return idempotency.Record{}, v.s.idemWrap(ctx, "inspect", err)
	}
	rec.Exists = true
	rec.Completed = state == idemDone
	rec.Fence = uint64(fence)
	if !rec.Completed && claimUS > 0 {
		rec.ClaimTTL = time.Duration(claimUS) * time.Microsecond
	}
	rec.Expires = time.Duration(leftUS) * time.Microsecond
	if message != nil {
		rec.Outcome.Message = *message
	}
	if !rec.Completed {
		rec.Outcome = idempotency.Outcome{}
	}
	return rec, nil
}

// idemTx is the transactional form on the caller's transaction.
type idemTx struct {
	v  idemView
	tx querier // nil for a nil transaction
}

func (t idemTx) Claim(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	if t.tx == nil {
		return driver.Begun{}, fmt.Errorf("%w: pgstore: nil transaction", idempotency.ErrInvalid)
	}
	return t.v.begin(ctx, t.tx, b)
}

func (t idemTx) Undo(ctx context.Context) error {
	if t.tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", idempotency.ErrInvalid)
	}
	if _, err := t.tx.exec(ctx, `ROLLBACK TO SAVEPOINT `+idemSavepoint); err != nil {
		return t.v.s.idemWrap(ctx, "undo", err)
	}
	return nil
}

func (t idemTx) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if t.tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", idempotency.ErrInvalid)
	}
	return t.v.complete(ctx, t.tx, id, token, fence, out, retention)
}

func (t idemTx) Release(ctx context.Context, id idempotency.ID, token string) error {
	if t.tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", idempotency.ErrInvalid)
	}
	return t.v.release(ctx, t.tx, id, token)
}
