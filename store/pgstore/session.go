package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

type sessionQueries struct {
	create, load, touch, save, get, userOf, lockUser, lockSession string
	moveRotated, del, bumpUser, delUser, list, sweep, checkShare  string
	users                                                         string
}

func sessionSQL(schema string) *sessionQueries {
	t := schema + ".sessions"
	u := schema + ".session_users"
	// Every statement reads the clock once (c.now): clock_timestamp(), not
	// now(), which is the start of the transaction.
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	const live = `s.idle_until > c.now AND s.absolute_until > c.now`
	const cols = `s.user_id, s.data, s.version, s.created_at, s.idle_until, s.absolute_until`
	return &sessionQueries{
		// $1 id, $2 user, $3 data, $4 idle, $5 absolute. The user row is
		// upserted first, which takes its lock until the insert commits.
		create: `WITH c AS (SELECT clock_timestamp() AS now),
u AS (INSERT INTO ` + u + ` AS su (user_id) VALUES ($2)
	ON CONFLICT (user_id) DO UPDATE SET generation = su.generation RETURNING su.user_id)
INSERT INTO ` + t + ` AS s (id, user_id, data, version, created_at, idle_until, absolute_until)
SELECT $1, u.user_id, $3, 1, c.now, least(c.now + ($4::bigint * interval '1 microsecond'), c.now + ($5::bigint * interval '1 microsecond')), c.now + ($5::bigint * interval '1 microsecond') FROM c, u
ON CONFLICT (id) DO NOTHING
RETURNING ` + cols,
		// $1 id, $2 idle.
		load: clock + `UPDATE ` + t + ` AS s SET idle_until = least(c.now + ($2::bigint * interval '1 microsecond'), s.absolute_until) FROM c
WHERE s.id = $1 AND ` + live + ` RETURNING ` + cols,
		// $1 id, $2 idle, $3 version.
		touch: clock + `UPDATE ` + t + ` AS s SET idle_until = least(c.now + ($2::bigint * interval '1 microsecond'), s.absolute_until) FROM c
WHERE s.id = $1 AND s.version = $3 AND ` + live + ` RETURNING s.idle_until`,
		// $1 id, $2 idle, $3 version, $4 data.
		save: clock + `UPDATE ` + t + ` AS s SET data = $4, version = s.version + 1,
	idle_until = least(c.now + ($2::bigint * interval '1 microsecond'), s.absolute_until) FROM c
WHERE s.id = $1 AND s.version = $3 AND ` + live + ` RETURNING ` + cols,
		// $1 id.
		get:         clock + `SELECT ` + cols + ` FROM ` + t + ` AS s, c WHERE s.id = $1 AND ` + live,
		userOf:      `SELECT user_id FROM ` + t + ` WHERE id = $1`,
		lockUser:    `SELECT 1 FROM ` + u + ` WHERE user_id = $1 FOR SHARE`,
		lockSession: clock + `SELECT ` + cols + ` FROM ` + t + ` AS s, c WHERE s.id = $1 AND ` + live + ` FOR UPDATE OF s`,
		// $1 id.
		checkShare: clock + `SELECT s.version FROM ` + t + ` AS s, c WHERE s.id = $1 AND ` + live + ` FOR SHARE OF s`,
		// $1 old id, $2 new id, $3 data, $4 idle.
		moveRotated: `WITH c AS (SELECT clock_timestamp() AS now),
o AS (DELETE FROM ` + t + ` WHERE id = $1 RETURNING *)
INSERT INTO ` + t + ` AS s (id, user_id, data, version, created_at, idle_until, absolute_until)
SELECT $2, o.user_id, $3, o.version + 1, o.created_at, least(c.now + ($4::bigint * interval '1 microsecond'), o.absolute_until), o.absolute_until FROM o, c
ON CONFLICT (id) DO NOTHING
RETURNING ` + cols,
		// $1 id.
		del: `WITH c AS (SELECT clock_timestamp() AS now),
d AS (DELETE FROM ` + t + ` WHERE id = $1 RETURNING idle_until, absolute_until)
SELECT d.idle_until > c.now AND d.absolute_until > c.now FROM d, c`,
		// $1 user.
		bumpUser: `INSERT INTO ` + u + ` AS su (user_id, generation) VALUES ($1, 1)
ON CONFLICT (user_id) DO UPDATE SET generation = su.generation + 1`,
		delUser: `WITH c AS (SELECT clock_timestamp() AS now),
d AS (DELETE FROM ` + t + ` WHERE user_id = $1 RETURNING idle_until, absolute_until)
SELECT count(*) FILTER (WHERE d.idle_until > c.now AND d.absolute_until > c.now) FROM d CROSS JOIN c`,
		list: clock + `SELECT s.id, ` + cols + ` FROM ` + t + ` AS s, c WHERE s.user_id = $1 AND ` + live +
			` ORDER BY s.created_at, s.id`,
		sweep: clock + `DELETE FROM ` + t + ` AS s USING c WHERE NOT (` + live + `)`,
		// $1 prefix, $2 after, $3 limit; byte order, as the lease list.
		users: clock + `SELECT s.user_id, count(*), max(s.created_at) FROM ` + t + ` AS s, c
WHERE s.user_id COLLATE "C" >= $1 COLLATE "C" AND left(s.user_id, length($1)) = $1 AND s.user_id COLLATE "C" > $2 COLLATE "C" AND ` + live + `
GROUP BY s.user_id ORDER BY s.user_id COLLATE "C" LIMIT $3`,
	}
}

// Sessions returns the Store's session.Store view. Loads, idle refreshes
// and saves are each one conditional UPDATE judged on clock_timestamp();
// Create, Rotate and RevokeUser serialize per user on a row of
// session_users, so RevokeUser is atomic with respect to both. Expired
// rows stay until [Store.SweepSessions] removes them.
func (s *Store) Sessions() session.Store { return sessions{s, s.sessionQueries()} }

func (s *Store) sessionQueries() *sessionQueries {
	return s.view("session", func() any {
		return sessionSQL(pgx.Identifier{s.schema}.Sanitize())
	}).(*sessionQueries)
}

// SweepSessions deletes the expired session rows (server clock) and
// returns how many. Run it now and then to reclaim space; correctness
// never depends on it.
func (s *Store) SweepSessions(ctx context.Context) (int, error) {
	n, err := s.db.exec(ctx, s.sessionQueries().sweep)
	if err != nil {
		return 0, s.sessionErr(ctx, "sweep", err)
	}
	return int(n), nil
}

type sessions struct {
	s *Store
	q *sessionQueries
}

// sessionErr classifies err from a request like wrap, with the session
// package's sentinel.
func (s *Store) sessionErr(ctx context.Context, op string, err error) error {
	if unavailable(ctx, err) {
		return fmt.Errorf("%w: pgstore: session %s: %w", session.ErrUnavailable, op, err)
	}
	return s.wrap(ctx, "session "+op, err)
}

func (v sessions) check() error {
	return nil
}

// rowOf returns the scan function of the first row of statement q on c.
func rowOf(ctx context.Context, c querier, q string, args ...any) func(dest ...any) error {
	return func(dest ...any) error { return c.queryRow(ctx, q, args, dest...) }
}

func scanRecord(scan func(dest ...any) error, id session.ID, withID bool) (session.Record, error) {
	var (
		r       session.Record
		sid     string
		version int64
	)
	dest := []any{&r.UserID, &r.Data, &version, &r.Created, &r.IdleUntil, &r.AbsoluteUntil}
	if withID {
		dest = append([]any{&sid}, dest...)
	}
	if err := scan(dest...); err != nil {
		return session.Record{}, err
	}
	r.ID = id
	if withID {
		r.ID = session.ID(sid)
	}
	r.Version = uint64(version)
	if r.Data == nil {
		r.Data = []byte{}
	}
	return r, nil
}

func data(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func validateWrite(id session.ID, version uint64, idle time.Duration) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := sessiondriver.ValidateVersion(version); err != nil {
		return err
	}
	return sessiondriver.ValidateTimeout(idle)
}

// interval rounds d up to PostgreSQL's microsecond resolution.
func interval(d time.Duration) time.Duration { return grantTTL(d) }

// miss tells ErrConflict (id is live at another version) from ErrNotFound
// after a conditional write changed nothing.
func (v sessions) miss(ctx context.Context, op string, id session.ID) error {
	_, err := scanRecord(rowOf(ctx, v.s.db, v.q.get, string(id)), id, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.ErrNotFound
	case err != nil:
		return v.s.sessionErr(ctx, op, err)
	}
	return session.ErrConflict
}

func (v sessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := sessiondriver.ValidateRecord(rec, idle, absolute); err != nil {
		return session.Record{}, err
	}
	if err := v.check(); err != nil {
		return session.Record{}, err
	}
	r, err := scanRecord(rowOf(ctx, v.s.db, v.q.create, string(rec.ID), rec.UserID, data(rec.Data), interval(idle), interval(absolute)), rec.ID, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.Record{}, session.ErrConflict
	case err != nil:
		return session.Record{}, v.s.sessionErr(ctx, "create", err)
	}
	return r, nil
}

func (v sessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	if idle != 0 {
		if err := sessiondriver.ValidateTimeout(idle); err != nil {
			return session.Record{}, err
		}
	}
	if err := v.check(); err != nil {
		return session.Record{}, err
	}
	var row func(dest ...any) error
	if idle == 0 {
		row = rowOf(ctx, v.s.db, v.q.get, string(id))
	} else {
		row = rowOf(ctx, v.s.db, v.q.load, string(id), interval(idle))
	}
	r, err := scanRecord(row, id, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.Record{}, session.ErrNotFound
	case err != nil:
		return session.Record{}, v.s.sessionErr(ctx, "load", err)
	}
	return r, nil
}

func (v sessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return time.Time{}, err
	}
	if err := v.check(); err != nil {
		return time.Time{}, err
	}
	var until time.Time
	err := rowOf(ctx, v.s.db, v.q.touch, string(id), interval(idle), int64(version))(&until)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, v.miss(ctx, "touch", id)
	case err != nil:
		return time.Time{}, v.s.sessionErr(ctx, "touch", err)
	}
	return until, nil
}

func (v sessions) Save(ctx context.Context, id session.ID, version uint64, b []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(b); err != nil {
		return session.Record{}, err
	}
	if err := v.check(); err != nil {
		return session.Record{}, err
	}
	r, err := scanRecord(rowOf(ctx, v.s.db, v.q.save, string(id), interval(idle), int64(version), data(b)), id, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.Record{}, v.miss(ctx, "save", id)
	case err != nil:
		return session.Record{}, v.s.sessionErr(ctx, "save", err)
	}
	return r, nil
}

// Rotate locks the user row (shared) before the session row, the order
// RevokeUser takes them in, so the two never deadlock and a RevokeUser
// either sees the new row or makes the rotation find nothing.
func (v sessions) Rotate(ctx context.Context, old, newID session.ID, version uint64, b []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(old, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := newID.Validate(); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(b); err != nil {
		return session.Record{}, err
	}
	if err := v.check(); err != nil {
		return session.Record{}, err
	}
	if newID == old {
		return session.Record{}, session.ErrConflict
	}
	// A session's user never changes, so it may be read outside the
	// transaction.
	var userID string
	err := rowOf(ctx, v.s.db, v.q.userOf, string(old))(&userID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.Record{}, session.ErrNotFound
	case err != nil:
		return session.Record{}, v.s.sessionErr(ctx, "rotate", err)
	}
	var out session.Record
	errTx := v.s.db.inTx(ctx, func(tx querier) error {
		if _, err := tx.exec(ctx, v.q.lockUser, userID); err != nil {
			return v.s.sessionErr(ctx, "rotate", err)
		}
		cur, err := scanRecord(rowOf(ctx, tx, v.q.lockSession, string(old)), old, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrNotFound
		case err != nil:
			return v.s.sessionErr(ctx, "rotate", err)
		}
		if cur.Version != version {
			return session.ErrConflict
		}
		out, err = scanRecord(rowOf(ctx, tx, v.q.moveRotated, string(old), string(newID), data(b), interval(idle)), newID, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrConflict
		case err != nil:
			return v.s.sessionErr(ctx, "rotate", err)
		}
		return nil
	})
	if errTx != nil {
		if errors.Is(errTx, session.ErrNotFound) || errors.Is(errTx, session.ErrConflict) ||
			errors.Is(errTx, session.ErrUnavailable) {
			return session.Record{}, errTx
		}
		return session.Record{}, v.s.sessionErr(ctx, "rotate", errTx)
	}
	return out, nil
}

func (v sessions) Delete(ctx context.Context, id session.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := v.check(); err != nil {
		return err
	}
	var live bool
	err := rowOf(ctx, v.s.db, v.q.del, string(id))(&live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.ErrNotFound
	case err != nil:
		return v.s.sessionErr(ctx, "revoke", err)
	case !live:
		return session.ErrNotFound // an expired row, removed
	}
	return nil
}

// DeleteUser takes the user row's lock (upserting it) in its first
// statement, which waits for every Create and Rotate of the user in flight
// and holds off new ones; its second statement, with a fresh snapshot, then
// sees and deletes every session they made.
func (v sessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	if err := v.check(); err != nil {
		return 0, err
	}
	var n int64
	err := v.s.db.inTx(ctx, func(tx querier) error {
		if _, err := tx.exec(ctx, v.q.bumpUser, userID); err != nil {
			return err
		}
		return tx.queryRow(ctx, v.q.delUser, []any{userID}, &n)
	})
	if err != nil {
		return 0, v.s.sessionErr(ctx, "revoke user", err)
	}
	return int(n), nil
}

func (v sessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	var out []session.Record
	err := v.s.db.query(ctx, v.q.list, []any{userID}, func(scan func(dest ...any) error) error {
		r, err := scanRecord(scan, "", true)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, v.s.sessionErr(ctx, "list", err)
	}
	return out, nil
}

// Users lists the users with live sessions (sessiondriver.UserLister), in
// byte order of their IDs, on clock_timestamp().
func (v sessions) Users(ctx context.Context, prefix, after string, limit int) ([]sessiondriver.UserInfo, error) {
	if err := sessiondriver.ValidateUserList(prefix, after, limit); err != nil {
		return nil, err
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	out := []sessiondriver.UserInfo{}
	err := v.s.db.query(ctx, v.q.users, []any{prefix, after, limit}, func(scan func(dest ...any) error) error {
		var (
			u sessiondriver.UserInfo
			n int64
		)
		if err := scan(&u.UserID, &n, &u.Newest); err != nil {
			return err
		}
		u.Sessions = int(n)
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, v.s.sessionErr(ctx, "users", err)
	}
	return out, nil
}

// checkSession is Tx's CheckSession: the session's row, live on
// clock_timestamp(), locked FOR SHARE until tx ends.
func (s *Store) checkSession(ctx context.Context, tx querier, id session.ID, version uint64) error {
	if tx == nil {
		return fmt.Errorf("%w: pgstore: nil transaction", session.ErrInvalid)
	}
	if err := id.Validate(); err != nil {
		return err
	}
	var v int64
	err := tx.queryRow(ctx, s.sessionQueries().checkShare, []any{string(id)}, &v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("pgstore: check session: %w", session.ErrNotFound)
	case err != nil:
		return s.sessionErr(ctx, "check", err)
	case version != 0 && uint64(v) != version:
		return fmt.Errorf("pgstore: check session: at version %d, not %d: %w", v, version, session.ErrConflict)
	}
	return nil
}
