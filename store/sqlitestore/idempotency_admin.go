package sqlitestore

import (
	"context"
	"database/sql"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// The idempotency view implements idempotency.Admin.
var _ idempotency.Admin = idemView{}

type idemAdminQueries struct {
	list, resolve, release string
}

func idemAdminSQL(prefix string) idemAdminQueries {
	r := strings.NewReplacer("$T", `"`+prefix+`idempotency"`)
	return idemAdminQueries{
		// ?1 now, ?2 scope prefix, ?3 its length in bytes, ?4 state
		// (idempotency.RecordState), ?5 limit.
		list: r.Replace(`SELECT scope, "key", fingerprint, token, fence, state, claim_us, expires_us, failed, message, value
			FROM $T
			WHERE state <> 3 AND expires_us > ?1
				AND (?3 = 0 OR substr(CAST(scope AS BLOB), 1, ?3) = CAST(?2 AS BLOB))
				AND (?4 = 0
					OR (?4 = 1 AND state = 1 AND claim_us > ?1)
					OR (?4 = 2 AND state = 1 AND (claim_us IS NULL OR claim_us <= ?1))
					OR (?4 = 3 AND state = 2))
			ORDER BY scope, "key" LIMIT ?5`),
		// ?1 scope, ?2 key, ?3 expires, ?4 failed, ?5 message, ?6 value.
		// The caller checked the row under the write lock.
		resolve: r.Replace(`UPDATE $T SET state = 2, token = NULL, claim_us = NULL, expires_us = ?3,
				failed = ?4, message = ?5, value = ?6
			WHERE scope = ?1 AND "key" = ?2 AND state = 1`),
		// ?1 scope, ?2 key. The row stays, with its fence.
		release: r.Replace(`UPDATE $T SET state = 3, token = NULL, claim_us = NULL, value = NULL, message = NULL
			WHERE scope = ?1 AND "key" = ?2 AND state = 1`),
	}
}

func (v idemView) adminQueries() *idemAdminQueries {
	return v.s.view("idempotency admin", func() any {
		q := idemAdminSQL(v.s.q.prefix)
		return &q
	}).(*idemAdminQueries)
}

// record returns what Inspect reports for the row r at now.
func (r idemRow) record(id idempotency.ID, now int64) idempotency.Record {
	rec := idempotency.Record{ID: id}
	if !r.live(now) {
		return rec
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
	return rec
}

// List returns the live records that match f, ordered by scope and key
// (bytes), from one read that does not take the write lock.
func (v idemView) List(ctx context.Context, f idempotency.Filter) ([]idempotency.Record, error) {
	f, err := driver.ValidateFilter(f)
	if err != nil {
		return nil, err
	}
	now := v.s.nowUS()
	rows, err := v.s.db.QueryContext(ctx, v.adminQueries().list, now, f.ScopePrefix, len(f.ScopePrefix), int(f.State), f.Limit)
	if err != nil {
		return nil, idemUnavailable("list", err)
	}
	defer rows.Close()
	var out []idempotency.Record
	for rows.Next() {
		var (
			id idempotency.ID
			r  idemRow
		)
		if err := rows.Scan(&id.Scope, &id.Key, &r.fp, &r.token, &r.fence, &r.state, &r.claimUS, &r.expires,
			&r.failed, &r.message, &r.value); err != nil {
			return nil, idemUnavailable("list", err)
		}
		if rec := r.record(id, now); f.Match(rec) {
			out = append(out, rec)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, idemUnavailable("list", err)
	}
	return out, nil
}

// settle runs change in a write transaction after checking s against the
// row read under the write lock.
func (v idemView) settle(ctx context.Context, op string, s idempotency.Settle, change func(tx *sql.Tx, now int64) error) error {
	return v.write(ctx, op, func(tx *sql.Tx, now int64) error {
		r, err := v.get(ctx, tx, s.ID)
		if err != nil {
			return idemErr(op, err)
		}
		if err := driver.SettleError(s, r.record(s.ID, now)); err != nil {
			return err
		}
		return change(tx, now)
	})
}

// Resolve records out for the record s names, guarded by its fence, in
// one write transaction.
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
	return v.settle(ctx, "resolve", s, func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, v.adminQueries().resolve, s.Scope, s.Key, now+micros(retention),
			out.Failed, driver.CleanMessage(out.Message), value)
		if err != nil {
			return idemErr("resolve", err)
		}
		return lostUnless(res, "resolve")
	})
}

// ForceRelease drops the claim of the record s names, guarded by its
// fence, in one write transaction. The row keeps its fence.
func (v idemView) ForceRelease(ctx context.Context, s idempotency.Settle) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	return v.settle(ctx, "release", s, func(tx *sql.Tx, _ int64) error {
		res, err := tx.ExecContext(ctx, v.adminQueries().release, s.Scope, s.Key)
		if err != nil {
			return idemErr("release", err)
		}
		return lostUnless(res, "release")
	})
}
