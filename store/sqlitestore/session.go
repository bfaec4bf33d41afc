package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// sessionQueries are the session statements for one table prefix.
type sessionQueries struct {
	create, sweepUser, load, touch, save, get, version string
	insertRotated, del, delUser, list, sweep           string
	users                                              string
}

func sessionSQL(prefix string) sessionQueries {
	t := `"` + prefix + `sessions"`
	r := strings.NewReplacer("$T", t, "$I", `"`+prefix+`sessions_user"`)
	const cols = `user_id, data, version, created_us, idle_us, absolute_us`
	// ?2 is the store clock in µs wherever "live" is tested.
	const live = `idle_us > ?2 AND absolute_us > ?2`
	return sessionQueries{
		// ?1 id, ?2 now, ?3 user, ?4 data, ?5 idle µs, ?6 absolute µs.
		create: r.Replace(`INSERT INTO $T (id, ` + cols + `)
			VALUES (?1, ?3, ?4, 1, ?2, min(?2 + ?5, ?2 + ?6), ?2 + ?6)
			ON CONFLICT (id) DO NOTHING
			RETURNING ` + cols),
		// ?1 user, ?2 now: the user's expired rows.
		sweepUser: r.Replace(`DELETE FROM $T WHERE user_id = ?1 AND NOT (` + live + `)`),
		// ?1 id, ?2 now, ?3 idle µs.
		load: r.Replace(`UPDATE $T SET idle_us = min(?2 + ?3, absolute_us)
			WHERE id = ?1 AND ` + live + ` RETURNING ` + cols),
		// ?1 id, ?2 now, ?3 idle µs, ?4 version.
		touch: r.Replace(`UPDATE $T SET idle_us = min(?2 + ?3, absolute_us)
			WHERE id = ?1 AND version = ?4 AND ` + live + ` RETURNING idle_us`),
		// ?1 id, ?2 now, ?3 idle µs, ?4 version, ?5 data.
		save: r.Replace(`UPDATE $T SET data = ?5, version = version + 1, idle_us = min(?2 + ?3, absolute_us)
			WHERE id = ?1 AND version = ?4 AND ` + live + ` RETURNING ` + cols),
		// ?1 id, ?2 now.
		get: r.Replace(`SELECT ` + cols + ` FROM $T WHERE id = ?1 AND ` + live),
		// ?1 id, ?2 now.
		version: r.Replace(`SELECT version FROM $T WHERE id = ?1 AND ` + live),
		// ?1 new id, ?2 now, ?3 idle µs, ?4 user, ?5 data, ?6 version, ?7 created, ?8 absolute.
		insertRotated: r.Replace(`INSERT INTO $T (id, ` + cols + `)
			VALUES (?1, ?4, ?5, ?6, ?7, min(?2 + ?3, ?8), ?8)
			ON CONFLICT (id) DO NOTHING
			RETURNING ` + cols),
		// ?1 id, ?2 now.
		del:     r.Replace(`DELETE FROM $T WHERE id = ?1 RETURNING ` + live),
		delUser: r.Replace(`DELETE FROM $T WHERE user_id = ?1 RETURNING ` + live),
		list:    r.Replace(`SELECT id, ` + cols + ` FROM $T WHERE user_id = ?1 AND ` + live + ` ORDER BY created_us, id`),
		// ?1 now.
		sweep: r.Replace(`DELETE FROM $T WHERE NOT (idle_us > ?1 AND absolute_us > ?1)`),
		// ?1 prefix, ?2 now, ?3 after, ?4 limit: a range of the per-user
		// index (text compares bytewise).
		users: r.Replace(`SELECT user_id, count(*), max(created_us) FROM $T
			WHERE user_id >= ?1 AND substr(user_id, 1, length(?1)) = ?1 AND user_id > ?3 AND ` + live + `
			GROUP BY user_id ORDER BY user_id LIMIT ?4`),
	}
}

// Sessions returns the store's session.Store view. Every write is one
// write transaction that reads the store's clock (Options.Clock) only once
// it holds SQLite's write lock; idle refreshes are conditional UPDATEs.
// Expired rows stay until [Store.SweepSessions] removes them (or their user
// creates a session); reads judge the deadlines, never the sweep.
func (s *Store) Sessions() session.Store { return sessions{s, s.sessionQueries()} }

func (s *Store) sessionQueries() *sessionQueries {
	return s.view("session", func() any {
		q := sessionSQL(s.q.prefix)
		return &q
	}).(*sessionQueries)
}

// SweepSessions deletes the expired session rows (store clock) and
// returns how many. Run it now and then to reclaim space; correctness
// never depends on it.
func (s *Store) SweepSessions(ctx context.Context) (int, error) {
	q := s.sessionQueries()
	var n int64
	err := s.sessionWrite(ctx, "sweep", func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, q.sweep, now)
		if err != nil {
			return sessionUnavailable("sweep", err)
		}
		n, err = res.RowsAffected()
		if err != nil {
			return sessionUnavailable("sweep", err)
		}
		return nil
	})
	return int(n), err
}

type sessions struct {
	s *Store
	q *sessionQueries
}

func sessionUnavailable(op string, err error) error {
	return fmt.Errorf("%w: sqlitestore: session %s: %w", session.ErrUnavailable, op, err)
}

// sessionWrite runs fn in a write transaction (see Store.writeTx), with
// database errors wrapped by sessionUnavailable.
func (s *Store) sessionWrite(ctx context.Context, op string, fn func(tx *sql.Tx, now int64) error) error {
	return s.writeTx(ctx, laneNormal, func(err error) error { return sessionUnavailable(op, err) }, fn)
}

func us(d time.Duration) int64 { return micros(d) }

// scanRecord scans the cols of a session row.
func scanRecord(row interface{ Scan(...any) error }, id session.ID, withID bool) (session.Record, error) {
	var (
		r                   session.Record
		sid                 string
		version             int64
		created, idle, absT int64
	)
	dest := []any{&r.UserID, &r.Data, &version, &created, &idle, &absT}
	if withID {
		dest = append([]any{&sid}, dest...)
	}
	if err := row.Scan(dest...); err != nil {
		return session.Record{}, err
	}
	r.ID = id
	if withID {
		r.ID = session.ID(sid)
	}
	r.Version = uint64(version)
	r.Created, r.IdleUntil, r.AbsoluteUntil = time.UnixMicro(created), time.UnixMicro(idle), time.UnixMicro(absT)
	if r.Data == nil {
		r.Data = []byte{}
	}
	return r, nil
}

// miss tells ErrConflict (id is live at another version) from ErrNotFound.
func (v sessions) miss(ctx context.Context, tx *sql.Tx, op string, id session.ID, now int64) error {
	_, err := scanRecord(tx.QueryRowContext(ctx, v.q.get, string(id), now), id, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return session.ErrNotFound
	case err != nil:
		return sessionUnavailable(op, err)
	}
	return session.ErrConflict
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

func (v sessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := sessiondriver.ValidateRecord(rec, idle, absolute); err != nil {
		return session.Record{}, err
	}
	var out session.Record
	err := v.s.sessionWrite(ctx, "create", func(tx *sql.Tx, now int64) error {
		if _, err := tx.ExecContext(ctx, v.q.sweepUser, rec.UserID, now); err != nil {
			return sessionUnavailable("create", err)
		}
		r, err := scanRecord(tx.QueryRowContext(ctx, v.q.create, string(rec.ID), now, rec.UserID, data(rec.Data), us(idle), us(absolute)), rec.ID, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrConflict
		case err != nil:
			return sessionUnavailable("create", err)
		}
		out = r
		return nil
	})
	return out, err
}

// data returns b as a non-nil BLOB argument.
func data(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (v sessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	if idle == 0 {
		now := v.s.nowUS()
		r, err := scanRecord(v.s.db.QueryRowContext(ctx, v.q.get, string(id), now), id, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.Record{}, session.ErrNotFound
		case err != nil:
			return session.Record{}, sessionUnavailable("load", err)
		}
		return r, nil
	}
	if err := sessiondriver.ValidateTimeout(idle); err != nil {
		return session.Record{}, err
	}
	var out session.Record
	err := v.s.sessionWrite(ctx, "load", func(tx *sql.Tx, now int64) error {
		r, err := scanRecord(tx.QueryRowContext(ctx, v.q.load, string(id), now, us(idle)), id, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrNotFound
		case err != nil:
			return sessionUnavailable("load", err)
		}
		out = r
		return nil
	})
	return out, err
}

func (v sessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return time.Time{}, err
	}
	var until int64
	err := v.s.sessionWrite(ctx, "touch", func(tx *sql.Tx, now int64) error {
		err := tx.QueryRowContext(ctx, v.q.touch, string(id), now, us(idle), int64(version)).Scan(&until)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return v.miss(ctx, tx, "touch", id, now)
		case err != nil:
			return sessionUnavailable("touch", err)
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(until), nil
}

func (v sessions) Save(ctx context.Context, id session.ID, version uint64, b []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(b); err != nil {
		return session.Record{}, err
	}
	var out session.Record
	err := v.s.sessionWrite(ctx, "save", func(tx *sql.Tx, now int64) error {
		r, err := scanRecord(tx.QueryRowContext(ctx, v.q.save, string(id), now, us(idle), int64(version), data(b)), id, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return v.miss(ctx, tx, "save", id, now)
		case err != nil:
			return sessionUnavailable("save", err)
		}
		out = r
		return nil
	})
	return out, err
}

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
	if newID == old {
		return session.Record{}, session.ErrConflict
	}
	var out session.Record
	err := v.s.sessionWrite(ctx, "rotate", func(tx *sql.Tx, now int64) error {
		cur, err := scanRecord(tx.QueryRowContext(ctx, v.q.get, string(old), now), old, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrNotFound
		case err != nil:
			return sessionUnavailable("rotate", err)
		}
		if cur.Version != version {
			return session.ErrConflict
		}
		r, err := scanRecord(tx.QueryRowContext(ctx, v.q.insertRotated, string(newID), now, us(idle), cur.UserID, data(b),
			int64(version+1), cur.Created.UnixMicro(), cur.AbsoluteUntil.UnixMicro()), newID, false)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrConflict
		case err != nil:
			return sessionUnavailable("rotate", err)
		}
		var live bool
		if err := tx.QueryRowContext(ctx, v.q.del, string(old), now).Scan(&live); err != nil {
			return sessionUnavailable("rotate", err)
		}
		out = r
		return nil
	})
	return out, err
}

func (v sessions) Delete(ctx context.Context, id session.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	return v.s.sessionWrite(ctx, "revoke", func(tx *sql.Tx, now int64) error {
		var live bool
		err := tx.QueryRowContext(ctx, v.q.del, string(id), now).Scan(&live)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return session.ErrNotFound
		case err != nil:
			return sessionUnavailable("revoke", err)
		}
		if !live {
			// An expired row is no session any more; the delete rolls back
			// and the sweep removes it.
			return session.ErrNotFound
		}
		return nil
	})
}

func (v sessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	n := 0
	err := v.s.sessionWrite(ctx, "revoke user", func(tx *sql.Tx, now int64) error {
		rows, err := tx.QueryContext(ctx, v.q.delUser, userID, now)
		if err != nil {
			return sessionUnavailable("revoke user", err)
		}
		defer rows.Close()
		for rows.Next() {
			var live bool
			if err := rows.Scan(&live); err != nil {
				return sessionUnavailable("revoke user", err)
			}
			if live {
				n++
			}
		}
		if err := rows.Err(); err != nil {
			return sessionUnavailable("revoke user", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (v sessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	rows, err := v.s.db.QueryContext(ctx, v.q.list, userID, v.s.nowUS())
	if err != nil {
		return nil, sessionUnavailable("list", err)
	}
	defer rows.Close()
	var out []session.Record
	for rows.Next() {
		r, err := scanRecord(rows, "", true)
		if err != nil {
			return nil, sessionUnavailable("list", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, sessionUnavailable("list", err)
	}
	return out, nil
}

// Users lists the users with live sessions (sessiondriver.UserLister),
// from a range of the per-user index.
func (v sessions) Users(ctx context.Context, prefix, after string, limit int) ([]sessiondriver.UserInfo, error) {
	if err := sessiondriver.ValidateUserList(prefix, after, limit); err != nil {
		return nil, err
	}
	rows, err := v.s.db.QueryContext(ctx, v.q.users, prefix, v.s.nowUS(), after, limit)
	if err != nil {
		return nil, sessionUnavailable("users", err)
	}
	defer rows.Close()
	out := []sessiondriver.UserInfo{}
	for rows.Next() {
		var (
			u      sessiondriver.UserInfo
			newest int64
		)
		if err := rows.Scan(&u.UserID, &u.Sessions, &newest); err != nil {
			return nil, sessionUnavailable("users", err)
		}
		u.Newest = time.UnixMicro(newest).UTC()
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, sessionUnavailable("users", err)
	}
	return out, nil
}

// checkSession is Tx's CheckSession: the write lock for tx (so no revoke,
// rotation or save commits before tx ends), then the session's row read on
// the store's clock.
func (s *Store) checkSession(ctx context.Context, tx *sql.Tx, id session.ID, version uint64) error {
	if tx == nil {
		return fmt.Errorf("%w: sqlitestore: nil transaction", session.ErrInvalid)
	}
	if err := id.Validate(); err != nil {
		return err
	}
	q := s.sessionQueries()
	if _, err := tx.ExecContext(ctx, s.q.lock); err != nil {
		return sessionTxError(err)
	}
	var v int64
	err := tx.QueryRowContext(ctx, q.version, string(id), s.nowUS()).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlitestore: check session: %w", session.ErrNotFound)
	case err != nil:
		return sessionTxError(err)
	case version != 0 && uint64(v) != version:
		return fmt.Errorf("sqlitestore: check session: at version %d, not %d: %w", v, version, session.ErrConflict)
	}
	return nil
}

// sessionTxError wraps a database error inside the caller's transaction
// like txError, with the session package's sentinel.
func sessionTxError(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlitestore: check session: %w", err)
	}
	return sessionUnavailable("check", err)
}
