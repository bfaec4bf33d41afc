package fencedkv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/txn"
)

// SessionKV is a table of values of users, each written in one transaction
// with the store's CheckSession (txn.Tx), so that a value changes only
// while the session of the request that writes it is live: a write that
// commits after the session was revoked does not land. It is safe for
// concurrent use.
type SessionKV struct {
	db    *sql.DB
	s     txn.Store
	table string
	d     Dialect
}

// NewSessionKV returns the table table (a quoted, possibly
// schema-qualified name) on db, whose writes are checked against the
// sessions of s (sqlitestore's or pgstore's Store, on db's tables), and
// creates it if missing.
func NewSessionKV(ctx context.Context, db *sql.DB, d Dialect, table string, s txn.Store) (*SessionKV, error) {
	blob := "BLOB"
	if d == Postgres {
		blob = "bytea"
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		user_id TEXT NOT NULL,
		name TEXT NOT NULL,
		value `+blob+` NOT NULL,
		PRIMARY KEY (user_id, name)
	)`); err != nil {
		return nil, fmt.Errorf("fencedkv: create %s: %w", table, err)
	}
	return &SessionKV{db: db, s: s, table: table, d: d}, nil
}

func sessionUnavailable(op, userID, name string, err error) error {
	return fmt.Errorf("%w: session value %s %q of %q: %w", session.ErrUnavailable, op, name, userID, err)
}

// SessionWrite sets userID's value name to value if session id is live
// and, when version is not 0, at version, checked in the transaction that
// writes the value. A session that ended gets an error wrapping
// session.ErrNotFound, one at another version session.ErrConflict, and
// nothing changes; a database error wraps session.ErrUnavailable.
func (kv *SessionKV) SessionWrite(ctx context.Context, id session.ID, version uint64, userID, name string, value []byte) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := serveapi.ValidateSessionValue(userID, name, value); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	tx, err := kv.db.BeginTx(ctx, nil)
	if err != nil {
		return sessionUnavailable("write", userID, name, err)
	}
	defer tx.Rollback()
	if err := kv.s.Tx(tx).CheckSession(ctx, id, version); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, kv.d.q(`INSERT INTO `+kv.table+` (user_id, name, value) VALUES (?1, ?2, ?3)
		ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value`), userID, name, value); err != nil {
		return sessionUnavailable("write", userID, name, err)
	}
	if err := tx.Commit(); err != nil {
		return sessionUnavailable("write", userID, name, err)
	}
	return nil
}

// SessionRead returns userID's value name and whether it was ever
// written.
func (kv *SessionKV) SessionRead(ctx context.Context, userID, name string) ([]byte, bool, error) {
	if err := serveapi.ValidateSessionValue(userID, name, nil); err != nil {
		return nil, false, err
	}
	var v []byte
	err := kv.db.QueryRowContext(ctx, kv.d.q(`SELECT value FROM `+kv.table+` WHERE user_id = ?1 AND name = ?2`), userID, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, sessionUnavailable("read", userID, name, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// MemSessionKV keeps values of users in the process, each write made
// while memstore's WithSession holds the session of the request that
// makes it: a value changes only while that session is live. It is safe
// for concurrent use.
type MemSessionKV struct {
	s  *memstore.Store
	mu sync.Mutex
	m  map[[2]string][]byte
}

// NewMemSessionKV returns an empty MemSessionKV whose writes are checked
// against the sessions of s.
func NewMemSessionKV(s *memstore.Store) *MemSessionKV {
	return &MemSessionKV{s: s, m: map[[2]string][]byte{}}
}

// SessionWrite is SessionKV's SessionWrite on the memory store.
func (kv *MemSessionKV) SessionWrite(ctx context.Context, id session.ID, version uint64, userID, name string, value []byte) error {
	if err := serveapi.ValidateSessionValue(userID, name, value); err != nil {
		return err
	}
	v := append([]byte{}, value...)
	return kv.s.WithSession(ctx, id, version, func() error {
		kv.mu.Lock()
		defer kv.mu.Unlock()
		kv.m[[2]string{userID, name}] = v
		return nil
	})
}

// SessionRead is SessionKV's SessionRead on the memory store.
func (kv *MemSessionKV) SessionRead(ctx context.Context, userID, name string) ([]byte, bool, error) {
	if err := serveapi.ValidateSessionValue(userID, name, nil); err != nil {
		return nil, false, err
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[[2]string{userID, name}]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}
