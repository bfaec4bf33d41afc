// Package fencedkv keeps fenced values on a SQL store: a value table next
// to the store's fence table, written in one transaction with the store's
// guard (txn.Tx's Admit), so that a value is replaced only by a write whose fence the guard
// admits. tenure serve uses it for its fencedWrite and fencedRead
// operations on SQLite and PostgreSQL.
//
// It also keeps values of users checked against a session (SessionKV on
// SQLite and PostgreSQL, written in one transaction with txn.Tx's
// CheckSession; MemSessionKV on the memory store, under its
// WithSession), for tenure serve's writeSessionValue and
// readSessionValue.
package fencedkv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/txn"
)

// Dialect is the SQL flavour of the database.
type Dialect int

const (
	// SQLite numbers parameters ?1, ?2 and keeps values as BLOB.
	SQLite Dialect = iota
	// Postgres numbers parameters $1, $2 and keeps values as bytea.
	Postgres
)

// KV is a fenced key-value table. It is safe for concurrent use.
type KV struct {
	db    *sql.DB
	s     txn.Store
	table string
	d     Dialect
}

// New returns the table table (a quoted, possibly schema-qualified name)
// on db, guarded by s (sqlitestore's or pgstore's Store, on db's tables),
// and creates it if missing.
func New(ctx context.Context, db *sql.DB, d Dialect, table string, s txn.Store) (*KV, error) {
	blob := "BLOB"
	if d == Postgres {
		blob = "bytea"
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		name TEXT PRIMARY KEY,
		value `+blob+` NOT NULL,
		fence TEXT NOT NULL
	)`); err != nil {
		return nil, fmt.Errorf("fencedkv: create %s: %w", table, err)
	}
	return &KV{db: db, s: s, table: table, d: d}, nil
}

func (kv *KV) q(s string) string { return kv.d.q(s) }

// q returns the statement s, written with SQLite's ?1, ?2, ?3, in d's
// parameters.
func (d Dialect) q(s string) string {
	if d == Postgres {
		return strings.NewReplacer("?1", "$1", "?2", "$2", "?3", "$3").Replace(s)
	}
	return s
}

func unavailable(op, name string, err error) error {
	return fmt.Errorf("%w: fenced %s %q: %w", lease.ErrUnavailable, op, name, err)
}

// FencedWrite sets name to value if f is admitted by the store's guard;
// otherwise it returns the guard's error (wrapping fence.ErrStale) and
// changes nothing.
func (kv *KV) FencedWrite(ctx context.Context, name string, f uint64, value []byte) error {
	return kv.write(ctx, name, f, value, func(t txn.Tx) error { return t.Admit(ctx, name, f) })
}

// write sets name to value, written by fence f, in one transaction with
// guard, which decides whether the write lands.
func (kv *KV) write(ctx context.Context, name string, f uint64, value []byte, guard func(txn.Tx) error) error {
	if err := leasedriver.ValidateKey(name); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	tx, err := kv.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("write", name, err)
	}
	defer tx.Rollback()
	if err := guard(kv.s.Tx(tx)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, kv.q(`INSERT INTO `+kv.table+` (name, value, fence) VALUES (?1, ?2, ?3)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value, fence = excluded.fence`),
		name, value, strconv.FormatUint(f, 10)); err != nil {
		return unavailable("write", name, err)
	}
	if err := tx.Commit(); err != nil {
		return unavailable("write", name, err)
	}
	return nil
}

// HolderWrite sets name to value only while l holds its key (the store's
// CheckHolder: token, fence and expiry on the database's clock, the lease
// row locked until the write commits) and the guard admits l's fence for
// name (AdmitAtLeast: several writes in one tenure). Otherwise it returns
// the check's error (wrapping lease.ErrNotHeld, or fence.ErrStale) and
// changes nothing.
func (kv *KV) HolderWrite(ctx context.Context, l *lease.Lease, name string, value []byte) error {
	return kv.write(ctx, name, l.Fence(), value, func(t txn.Tx) error {
		if err := t.CheckHolder(ctx, l); err != nil {
			return err
		}
		return t.AdmitAtLeast(ctx, name, l.Fence())
	})
}

// FencedRead returns name's value and the fence that wrote it (nil, 0 if
// never written).
func (kv *KV) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	if err := leasedriver.ValidateKey(name); err != nil {
		return nil, 0, err
	}
	var (
		v []byte
		f string
	)
	err := kv.db.QueryRowContext(ctx, kv.q(`SELECT value, fence FROM `+kv.table+` WHERE name = ?1`), name).Scan(&v, &f)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, unavailable("read", name, err)
	}
	n, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return nil, 0, unavailable("read", name, err)
	}
	return v, n, nil
}

// PlainWrite sets name to value without the guard. It exists for tests
// that need an unguarded writer beside the guarded one.
func (kv *KV) PlainWrite(ctx context.Context, name string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	_, err := kv.db.ExecContext(ctx, kv.q(`INSERT INTO `+kv.table+` (name, value, fence) VALUES (?1, ?2, '0')
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`), name, value)
	if err != nil {
		return unavailable("write", name, err)
	}
	return nil
}
