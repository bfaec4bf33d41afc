package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openCacheDB opens a queued database in a temporary directory with one
// connection, so that every statement runs on the same connection.
func openCacheDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := openQueued(DSN(filepath.Join(t.TempDir(), "cache.db")), &writeQueue{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE t (v INTEGER NOT NULL)`,
		`INSERT INTO t (v) VALUES (1), (2), (3)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// cachedQueries returns the statements the database's one connection
// keeps prepared.
func cachedQueries(t *testing.T, db *sql.DB) []string {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var qs []string
	if err := c.Raw(func(dc any) error {
		for q := range dc.(*queuedConn).stmts {
			qs = append(qs, q)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(qs)
	return qs
}

func values(t *testing.T, rows *sql.Rows) []int64 {
	t.Helper()
	var vs []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

// A statement run again while rows of it are still open (the same query
// nested in its own loop, on the same connection) runs unprepared; the
// open rows are not disturbed.
func TestStmtCacheNestedUse(t *testing.T) {
	db := openCacheDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT v FROM t WHERE v >= ? ORDER BY v`
	outer, err := tx.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]int64
	for outer.Next() {
		var v int64
		if err := outer.Scan(&v); err != nil {
			t.Fatal(err)
		}
		inner, err := tx.QueryContext(ctx, q, v)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]int64{v}, values(t, inner)...))
		inner.Close()
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	outer.Close()
	want := [][]int64{{1, 1, 2, 3}, {2, 2, 3}, {3, 3}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("nested queries read %v, want %v", got, want)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Once the rows are closed the prepared statement serves again.
	rows, err := db.QueryContext(ctx, q, 2)
	if err != nil {
		t.Fatal(err)
	}
	if vs := values(t, rows); !slices.Equal(vs, []int64{2, 3}) {
		t.Fatalf("read %v after the nested use, want [2 3]", vs)
	}
	rows.Close()
	if qs := cachedQueries(t, db); !slices.Contains(qs, q) {
		t.Fatalf("the query was not kept prepared: %q", qs)
	}
}

// Statements are kept per connection and answer with the table as it is
// now after the schema changed under them; a query that fails to prepare
// reports its error and is not kept.
func TestStmtCacheSchemaAndErrors(t *testing.T) {
	db := openCacheDB(t)
	ctx := context.Background()
	const sum = `SELECT sum(v) FROM t`
	var s int64
	if err := db.QueryRowContext(ctx, sum).Scan(&s); err != nil || s != 6 {
		t.Fatalf("sum = %d, %v; want 6", s, err)
	}
	const ins = `INSERT INTO t (v) VALUES (?)`
	for _, v := range []int64{10, 20} {
		res, err := db.ExecContext(ctx, ins, v)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("insert of %d affected %d rows, %v", v, n, err)
		}
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE t ADD COLUMN w INTEGER NOT NULL DEFAULT 7`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM t WHERE v = 1`); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, sum).Scan(&s); err != nil || s != 35 {
		t.Fatalf("sum after the schema change = %d, %v; want 35", s, err)
	}
	const all = `SELECT * FROM t ORDER BY v LIMIT 1`
	var v, w int64
	if err := db.QueryRowContext(ctx, all).Scan(&v, &w); err != nil || v != 2 || w != 7 {
		t.Fatalf("first row = (%d, %d), %v; want (2, 7)", v, w, err)
	}
	// The driver's column types come through a kept statement's rows.
	rows, err := db.QueryContext(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	cts, err := rows.ColumnTypes()
	rows.Close()
	if err != nil || len(cts) != 2 || cts[0].DatabaseTypeName() != "INTEGER" || cts[1].Name() != "w" {
		t.Fatalf("column types %v, %v; want two INTEGER columns v and w", cts, err)
	}
	const bad = `SELECT v FROM nosuchtable`
	if _, err := db.QueryContext(ctx, bad); err == nil || !strings.Contains(err.Error(), "nosuchtable") {
		t.Fatalf("query of a missing table: %v", err)
	}
	qs := cachedQueries(t, db)
	if slices.Contains(qs, bad) {
		t.Fatalf("a query that does not prepare was kept: %q", qs)
	}
	for _, q := range []string{sum, ins, all} {
		if !slices.Contains(qs, q) {
			t.Fatalf("%q was not kept prepared: %q", q, qs)
		}
	}
}
