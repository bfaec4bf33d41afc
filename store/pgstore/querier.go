package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// querier runs the Store's statements on one of the connections it can
// work on: a pgx pool or transaction, or a database/sql database or
// transaction (any PostgreSQL driver: pgx's stdlib driver, lib/pq). Every
// statement is written once, in a form all of them run alike:
//
//   - durations are sent as whole microseconds (bigint; the statements
//     multiply them by interval '1 microsecond'), rounded up;
//   - arrays travel as PostgreSQL array literals in text ($n::text::text[]
//     in, array::text out; see pgArray and parseInt64s);
//   - "no row" is reported as an error that matches sql.ErrNoRows (pgx's
//     ErrNoRows does too).
type querier interface {
	// queryRow runs q and scans its first row into dest.
	queryRow(ctx context.Context, q string, args []any, dest ...any) error
	// exec runs q and returns the number of rows it affected.
	exec(ctx context.Context, q string, args ...any) (int64, error)
	// query runs q and calls each for every row, with a scan function.
	query(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error
	// pipeline runs stmts in order, in one round trip where the
	// connection can. It stops at the first error, except that a
	// statement that reads no row does not stop the ones after it; the
	// first error is returned.
	pipeline(ctx context.Context, stmts ...stmt) error
}

// stmt is one statement of a pipeline: with dest, its first row is scanned
// into dest; without, it is executed.
type stmt struct {
	sql  string
	args []any
	dest []any
}

// conn is where a Store runs the statements it does not run in a caller's
// transaction.
type conn interface {
	querier
	// inTx runs fn in a transaction, committed when fn returns nil and
	// rolled back otherwise.
	inTx(ctx context.Context, fn func(q querier) error) error
}

// pgArgs converts the arguments the statements take into values every
// driver sends alike: a time.Duration becomes whole microseconds (rounded
// up), and nothing else changes.
func pgArgs(args []any) []any {
	var out []any
	for i, a := range args {
		d, ok := a.(time.Duration)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = int64((d + time.Microsecond - 1) / time.Microsecond)
	}
	if out == nil {
		return args
	}
	return out
}

// pgxConn is a pgx pool or a pgx transaction.
type pgxConn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pgxQ runs statements through pgx (a pool, or a transaction); a pipeline
// is one batch.
type pgxQ struct{ c pgxConn }

func (q pgxQ) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return q.c.QueryRow(ctx, sql, pgArgs(args)...).Scan(dest...)
}

func (q pgxQ) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.c.Exec(ctx, sql, pgArgs(args)...)
	return tag.RowsAffected(), err
}

func (q pgxQ) query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := q.c.Query(ctx, sql, pgArgs(args)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q pgxQ) pipeline(ctx context.Context, stmts ...stmt) error {
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.sql, pgArgs(s.args)...)
	}
	res := q.c.SendBatch(ctx, b)
	var first error
	for _, s := range stmts {
		var err error
		if s.dest != nil {
			err = res.QueryRow().Scan(s.dest...)
		} else {
			_, err = res.Exec()
		}
		if first == nil {
			first = err
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			break
		}
	}
	if err := res.Close(); first == nil || errors.Is(first, sql.ErrNoRows) {
		if err != nil {
			first = err
		}
	}
	return first
}

func (q pgxQ) inTx(ctx context.Context, fn func(q querier) error) error {
	return pgx.BeginFunc(ctx, q.c, func(tx pgx.Tx) error { return fn(pgxQ{tx}) })
}

// sqlRunner is a *sql.DB or a *sql.Tx.
type sqlRunner interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlQ runs statements through database/sql (a database, or a
// transaction), one round trip per statement.
type sqlQ struct{ r sqlRunner }

func (q sqlQ) queryRow(ctx context.Context, s string, args []any, dest ...any) error {
	return q.r.QueryRowContext(ctx, s, pgArgs(args)...).Scan(dest...)
}

func (q sqlQ) exec(ctx context.Context, s string, args ...any) (int64, error) {
	res, err := q.r.ExecContext(ctx, s, pgArgs(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlQ) query(ctx context.Context, s string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := q.r.QueryContext(ctx, s, pgArgs(args)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

func (q sqlQ) pipeline(ctx context.Context, stmts ...stmt) error {
	var first error
	for _, s := range stmts {
		var err error
		if s.dest != nil {
			err = q.queryRow(ctx, s.sql, s.args, s.dest...)
		} else {
			_, err = q.r.ExecContext(ctx, s.sql, pgArgs(s.args)...)
		}
		if first == nil {
			first = err
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			break
		}
	}
	return first
}

// sqlDBConn is a Store's *sql.DB.
type sqlDBConn struct {
	sqlQ
	db *sql.DB
}

func (c sqlDBConn) inTx(ctx context.Context, fn func(q querier) error) (err error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := fn(sqlQ{tx}); err != nil {
		return err
	}
	return tx.Commit()
}

// pgArray formats ss as a PostgreSQL array literal, every element quoted.
func pgArray[T string | int32 | int64](ss []T) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		switch v := any(s).(type) {
		case string:
			b.WriteByte('"')
			for j := 0; j < len(v); j++ {
				if v[j] == '"' || v[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(v[j])
			}
			b.WriteByte('"')
		case int32:
			b.WriteString(strconv.FormatInt(int64(v), 10))
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		}
	}
	b.WriteByte('}')
	return b.String()
}

// parseInt64s parses the text of a one-dimensional bigint array without
// NULLs ({1,2,3}).
func parseInt64s(s string) ([]int64, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, errors.New("pgstore: malformed array " + strconv.Quote(s))
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return []int64{}, nil
	}
	parts := strings.Split(body, ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, errors.New("pgstore: malformed array " + strconv.Quote(s))
		}
		out[i] = v
	}
	return out, nil
}
