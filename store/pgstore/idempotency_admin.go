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

// The idempotency view implements idempotency.Admin.
var _ idempotency.Admin = idemView{}

type idemAdminQueries struct {
	list, lock, resolve, release string
}

// idemCols are the columns List and the settling statements read, with
// the claim's and the retention's time left in microseconds on c.now.
const idemCols = `r.fingerprint, r.fence, r.state,
	coalesce(((extract(epoch FROM r.claim_until) - extract(epoch FROM c.now)) * 1000000)::bigint, 0),
	((extract(epoch FROM r.expires_at) - extract(epoch FROM c.now)) * 1000000)::bigint,
	r.failed, r.message`

func idemAdminSQL(schema string) *idemAdminQueries {
	t := schema + ".idempotency"
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	return &idemAdminQueries{
		// $1 scope prefix, $2 state (idempotency.RecordState), $3 limit.
		list: clock + `SELECT r.scope, r.key, ` + idemCols + `, r.value
FROM ` + t + ` AS r, c
WHERE r.state <> 3 AND r.expires_at > c.now AND starts_with(r.scope, $1::text)
	AND ($2::int = 0
		OR ($2::int = 1 AND r.state = 1 AND r.claim_until > c.now)
		OR ($2::int = 2 AND r.state = 1 AND (r.claim_until IS NULL OR r.claim_until <= c.now))
		OR ($2::int = 3 AND r.state = 2))
ORDER BY r.scope COLLATE "C", r.key COLLATE "C"
LIMIT $3`,
		// $1 scope, $2 key: the live row, locked until the transaction
		// ends.
		lock: clock + `SELECT ` + idemCols + `
FROM ` + t + ` AS r, c
WHERE r.scope = $1 AND r.key = $2 AND r.state <> 3 AND r.expires_at > c.now
FOR UPDATE OF r`,
		// $1 scope, $2 key, $3 fence, $4 retention, $5 failed, $6
		// message, $7 value.
		resolve: clock + `UPDATE ` + t + ` AS r SET state = 2, token = NULL, claim_until = NULL,
	expires_at = c.now + ($4::bigint * interval '1 microsecond'), failed = $5, message = $6, value = $7
FROM c
WHERE r.scope = $1 AND r.key = $2 AND r.fence = $3 AND r.state = 1`,
		// $1 scope, $2 key, $3 fence. The row stays, with its fence.
		release: `UPDATE ` + t + ` SET state = 3, token = NULL, claim_until = NULL, message = NULL, value = NULL
WHERE scope = $1 AND key = $2 AND fence = $3 AND state = 1`,
	}
}

func (v idemView) adminQueries() *idemAdminQueries {
	return v.s.view("idempotency admin", func() any { return idemAdminSQL(pgx.Identifier{v.s.schema}.Sanitize()) }).(*idemAdminQueries)
}

// idemScan reads the columns of idemCols into a record.
type idemScan struct {
	fence           int64
	state           int16
	claimUS, leftUS int64
	message         *string
}

func (x *idemScan) dest(rec *idempotency.Record) []any {
	return []any{&rec.Fingerprint, &x.fence, &x.state, &x.claimUS, &x.leftUS, &rec.Outcome.Failed, &x.message}
}

func (x *idemScan) fill(rec *idempotency.Record) {
	rec.Exists = true
	rec.Completed = x.state == idemDone
	rec.Fence = uint64(x.fence)
	if !rec.Completed && x.claimUS > 0 {
		rec.ClaimTTL = time.Duration(x.claimUS) * time.Microsecond
	}
	rec.Expires = time.Duration(x.leftUS) * time.Microsecond
	if x.message != nil {
		rec.Outcome.Message = *x.message
	}
	if !rec.Completed {
		rec.Outcome = idempotency.Outcome{}
	}
}

// List returns the live records that match f, ordered by scope and key
// (bytes), from one statement.
func (v idemView) List(ctx context.Context, f idempotency.Filter) ([]idempotency.Record, error) {
	f, err := driver.ValidateFilter(f)
	if err != nil {
		return nil, err
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	var out []idempotency.Record
	err = v.s.db.query(ctx, v.adminQueries().list, []any{f.ScopePrefix, int(f.State), f.Limit}, func(scan func(dest ...any) error) error {
		var (
			rec idempotency.Record
			x   idemScan
		)
		dest := append([]any{&rec.Scope, &rec.Key}, x.dest(&rec)...)
		if err := scan(append(dest, &rec.Outcome.Value)...); err != nil {
			return err
		}
		x.fill(&rec)
		if f.Match(rec) {
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, v.s.idemWrap(ctx, "list", err)
	}
	return out, nil
}

// settle locks the live row of s in a transaction, checks it against s,
// and runs change; it reports ErrChanged if change touched no row.
func (v idemView) settle(ctx context.Context, op string, s idempotency.Settle, change func(q querier) (int64, error)) error {
	if err := v.check(); err != nil {
		return err
	}
	var refused error
	err := v.s.db.inTx(ctx, func(q querier) error {
		rec := idempotency.Record{ID: s.ID}
		var x idemScan
		err := q.queryRow(ctx, v.adminQueries().lock, []any{s.Scope, s.Key}, x.dest(&rec)...)
		switch {
		case err == nil:
			x.fill(&rec)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if refused = driver.SettleError(s, rec); refused != nil {
			return refused
		}
		n, err := change(q)
		if err != nil {
			return err
		}
		if n != 1 {
			refused = fmt.Errorf("%w: key %q in scope %q", idempotency.ErrChanged, s.Key, s.Scope)
			return refused
		}
		return nil
	})
	if refused != nil {
		return refused
	}
	if err != nil {
		return v.s.idemWrap(ctx, op, err)
	}
	return nil
}

// Resolve records out for the record s names, guarded by its fence, in
// one transaction that locks the row.
func (v idemView) Resolve(ctx context.Context, s idempotency.Settle, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	value := out.Value
	if value == nil {
		value = []byte{}
	}
	return v.settle(ctx, "resolve", s, func(q querier) (int64, error) {
		return q.exec(ctx, v.adminQueries().resolve, s.Scope, s.Key, int64(s.Fence), grantTTL(retention),
			out.Failed, driver.CleanMessage(out.Message), value)
	})
}

// ForceRelease drops the claim of the record s names, guarded by its
// fence, in one transaction that locks the row. The row keeps its fence.
func (v idemView) ForceRelease(ctx context.Context, s idempotency.Settle) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	return v.settle(ctx, "release", s, func(q querier) (int64, error) {
		return q.exec(ctx, v.adminQueries().release, s.Scope, s.Key, int64(s.Fence))
	})
}
