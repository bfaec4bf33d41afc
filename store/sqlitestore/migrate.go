package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the embedded migration files, in order.
var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// PrefixPlaceholder is the text that stands for the table prefix in the
// migration files. [Migrations] and `tenure migrate sql --table-prefix PREFIX`
// replace it.
const PrefixPlaceholder = "{{prefix}}"

// SchemaVersion is the version of the tables this Store's code uses: the
// number of the last migration file.
var SchemaVersion = len(migrations)

// SchemaWindow is how many versions above [SchemaVersion] a schema may be
// for this code to run on it: migrations are expand-first (a version adds
// what the version before ignores and drops nothing), so during a rolling
// upgrade the instances of the version before run on the schema the new
// version migrated to.
const SchemaWindow = sqlmigrate.Window

// ErrDownRefused reports a down migration refused because it would drop
// data a guarantee rests on (fences, ledger rows, revocations). The error
// is a *[Refusal] listing what, and nothing changed.
var ErrDownRefused = sqlmigrate.ErrDownRefused

// Loss is what a down migration would drop: a guard of its down file that
// counted rows.
type Loss = sqlmigrate.Loss

// Refusal is the error of [Store.MigrateDown] when it would lose data;
// it wraps [ErrDownRefused].
type Refusal = sqlmigrate.Refusal

// ErrSchemaVersion reports tables whose recorded version is not
// [SchemaVersion]. The error names both versions.
var ErrSchemaVersion = sqlmigrate.ErrVersion

// Migration is one numbered migration file (NNNN_name.up.sql).
type Migration = sqlmigrate.Migration

// MigrationStatus compares what a database holds with the migrations this
// Store's code knows.
type MigrationStatus = sqlmigrate.Status

// MigrateMode says what a constructor does about the version of the
// store's tables (Options.Migrate).
type MigrateMode int

const (
	// MigrateDefault applies pending migrations in [Open] (the file and its
	// tables are tenure's own) and only checks the version in [New] (the
	// caller's database, whose schema the caller may manage with its own
	// tool).
	MigrateDefault MigrateMode = iota
	// MigrateApply applies the pending migrations, in order, in one
	// immediate transaction (so several processes opening the file at once
	// apply each migration once), then checks the version.
	MigrateApply
	// MigrateCheck changes nothing and fails unless the tables are at
	// [SchemaVersion] or up to [SchemaWindow] above it, with an error
	// wrapping [ErrSchemaVersion] that names both versions.
	MigrateCheck
	// MigrateSkip neither applies nor checks: for tools that only report
	// the version ([Store.MigrationStatus]) or apply it later
	// ([Store.Migrate]). Other calls fail if the tables are missing.
	MigrateSkip
)

// Migrations returns the migration files for the table prefix prefix (""
// means DefaultTablePrefix), with the placeholder resolved: plain
// NNNN_name.up.sql files, each ending with the statement that records its
// version, as goose, golang-migrate or atlas apply them, in order. A bad
// prefix is an error.
func Migrations(prefix string) (fs.FS, error) {
	return resolvedFiles(prefix, sqlmigrate.FS)
}

// resolvedFiles returns files (sqlmigrate.FS or DownFS) of the
// migrations for prefix ("" means DefaultTablePrefix), checked first.
func resolvedFiles(prefix string, files func([]sqlmigrate.Migration, string, string) fs.FS) (fs.FS, error) {
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return files(migrations, PrefixPlaceholder, prefix), nil
}

// DownMigrations returns the down files for the table prefix prefix (""
// means DefaultTablePrefix), with the placeholder resolved:
// NNNN_name.down.sql, each ending with the statement that removes its
// version. Next to [Migrations]' files they are golang-migrate's layout.
// Another tool runs no guard: count what a file's "tenure:guard-sql"
// comments count before applying it, or use [Store.MigrateDown].
func DownMigrations(prefix string) (fs.FS, error) {
	return resolvedFiles(prefix, sqlmigrate.DownFS)
}

// MigrationFiles returns the embedded migration files as they are, with
// [PrefixPlaceholder] standing for the table prefix.
func MigrationFiles() fs.FS {
	sub, _ := fs.Sub(migrationFiles, "migrations")
	return sub
}

// openMigrate runs what mode asks for on a new Store.
func (s *Store) openMigrate(ctx context.Context, mode MigrateMode, owned bool) error {
	if mode == MigrateDefault {
		mode = MigrateCheck
		if owned {
			mode = MigrateApply
		}
	}
	switch mode {
	case MigrateApply:
		return s.Migrate(ctx)
	case MigrateCheck:
		return s.Check(ctx)
	case MigrateSkip:
		return nil
	}
	return fmt.Errorf("sqlitestore: unknown Options.Migrate %d", mode)
}

// Migrate applies the migrations the database has not recorded yet, in
// order, in one immediate transaction (it takes SQLite's write lock at
// BEGIN, so several processes migrating one file at once apply each
// migration once), and keeps the rows of existing tables. Tables created by
// tenure before versions were recorded are adopted as version 1. Tables up
// to [SchemaWindow] versions newer (migrated by a newer tenure during a
// rolling upgrade) are left as they are; newer than that is refused with
// an error wrapping [ErrSchemaVersion] that names both versions, and
// nothing changes. No
// request path migrates.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.immediate(ctx, func(conn *sql.Conn) error {
		st, err := s.status(ctx, conn)
		if err != nil {
			return err
		}
		if st.Current > st.Latest+SchemaWindow {
			return s.versionErr(st.Current)
		}
		for _, m := range st.Pending {
			if _, err := conn.ExecContext(ctx, sqlmigrate.Resolve(m.SQL, PrefixPlaceholder, s.q.prefix)); err != nil {
				return fmt.Errorf("migration %s: %w", m.File, err)
			}
		}
		// The versions this call applies get this code's checksum, in
		// the same transaction; versions applied otherwise stay
		// unverified (no checksum).
		if len(st.Pending) > 0 && st.Pending[len(st.Pending)-1].Version >= checksumVersion {
			for _, m := range st.Pending {
				if _, err := conn.ExecContext(ctx, `UPDATE "`+s.q.prefix+`migrations" SET checksum = ?2 WHERE version = ?1`,
					m.Version, sqlmigrate.Checksum(m)); err != nil {
					return fmt.Errorf("record the checksum of %s: %w", m.File, err)
				}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrSchemaVersion) {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return err
}

// checksumVersion is the migration that adds the checksum column of the
// migrations table.
const checksumVersion = 6

// immediate runs fn in one immediate transaction (SQLite's write lock
// taken at BEGIN) on one connection, in the writers' turn, and commits if
// fn returns nil.
func (s *Store) immediate(ctx context.Context, fn func(conn *sql.Conn) error) error {
	// The writers' turn first, as the store's write transactions take it:
	// the queue of the file's writers in this process and, for Open's
	// database, the lock file the writers of every process take turns on
	// (LockFileSuffix). Without it the migration waited on SQLite's busy
	// handler, which polls for the write lock while those writers hand it
	// on among themselves.
	if err := s.wq.acquire(ctx, laneNormal); err != nil {
		return err
	}
	defer s.wq.release()
	if s.wq.lockPath != "" {
		unlock, err := fileLock(ctx, s.wq.lockPath)
		if err != nil {
			return err
		}
		defer unlock()
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := fn(conn); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	committed = true
	return nil
}

// MigrateDownPlan returns the migrations [Store.MigrateDown] would undo to
// take the tables to version to, newest first, and what their down files'
// guards count that would be lost. It only reads.
func (s *Store) MigrateDownPlan(ctx context.Context, to int) ([]Migration, []Loss, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: migrate down: %w", err)
	}
	defer conn.Close()
	return s.downPlan(ctx, conn, to)
}

// MigrateDown takes the tables down to version to (0: no tenure tables
// left), running the down files of the versions above it, newest first, in
// one immediate transaction. Before it changes anything it runs the guards
// of those down files; if any counts rows a guarantee rests on (fences,
// ledger rows, idempotency records), it returns a *[Refusal] wrapping
// [ErrDownRefused] that lists them and changes nothing, unless force is
// set. It returns what the guards counted (what a forced run dropped). A
// to below 0 or above the tables' version is an error wrapping
// tenure.ErrInvalid.
//
// Run it with the newer tenure before starting the older one: the down
// files of a version are in the code that applied it.
func (s *Store) MigrateDown(ctx context.Context, to int, force bool) ([]Loss, error) {
	var lost []Loss
	err := s.immediate(ctx, func(conn *sql.Conn) error {
		plan, l, err := s.downPlan(ctx, conn, to)
		if err != nil {
			return err
		}
		lost = l
		if len(lost) > 0 && !force {
			return &Refusal{Store: "sqlitestore", Lost: lost}
		}
		for _, m := range plan {
			if _, err := conn.ExecContext(ctx, sqlmigrate.Resolve(m.Down, PrefixPlaceholder, s.q.prefix)); err != nil {
				return fmt.Errorf("sqlitestore: migration %s: %w", m.DownFile, err)
			}
		}
		return nil
	})
	return lost, err
}

// downPlan is the plan of MigrateDown and what its guards count.
func (s *Store) downPlan(ctx context.Context, conn *sql.Conn, to int) ([]Migration, []Loss, error) {
	st, err := s.status(ctx, conn)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: migrate down: %w", err)
	}
	if to < 0 || to > st.Current {
		return nil, nil, fmt.Errorf("sqlitestore: migrate down to version %d: tables with prefix %q are at version %d: %w", to, s.q.prefix, st.Current, tenure.ErrInvalid)
	}
	plan, err := sqlmigrate.DownPlan(migrations, st.Current, to)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: tables with prefix %q: %w", s.q.prefix, err)
	}
	var lost []Loss
	for _, m := range plan {
		for _, g := range m.Guards {
			var n int64
			if err := conn.QueryRowContext(ctx, sqlmigrate.Resolve(g.SQL, PrefixPlaceholder, s.q.prefix)).Scan(&n); err != nil {
				return nil, nil, fmt.Errorf("sqlitestore: guard %q of %s: %w", g.What, m.DownFile, err)
			}
			if n > 0 {
				lost = append(lost, Loss{Version: m.Version, What: g.What, Rows: n})
			}
		}
	}
	return plan, lost, nil
}

func (s *Store) versionErr(current int) error {
	return sqlmigrate.Check("sqlitestore", fmt.Sprintf("tables with prefix %q", s.q.prefix), current, SchemaVersion)
}

// MigrationStatus reports the recorded version, the versions recorded and
// the migrations the database lacks. It only reads.
func (s *Store) MigrationStatus(ctx context.Context) (MigrationStatus, error) {
	st, err := s.status(ctx, s.db)
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("sqlitestore: migration status: %w", err)
	}
	return st, nil
}

// Check returns nil if the tables are at [SchemaVersion] or up to
// [SchemaWindow] versions above it, and otherwise an
// error wrapping [ErrSchemaVersion] that names the recorded version and
// the one this code needs (no tenure tables: version 0). It only reads.
func (s *Store) Check(ctx context.Context) error {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	return s.versionErr(st.Current)
}

type statusQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) status(ctx context.Context, q statusQueryer) (MigrationStatus, error) {
	st := MigrationStatus{Latest: SchemaVersion}
	var hasVersions, hasLeases bool
	err := q.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1),
		EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?2)`,
		s.q.prefix+"migrations", s.q.prefix+"leases").Scan(&hasVersions, &hasLeases)
	if err != nil {
		return st, err
	}
	if hasVersions {
		// The checksum column came with migration 6.
		var hasSums bool
		if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = 'checksum')`,
			s.q.prefix+"migrations").Scan(&hasSums); err != nil {
			return st, err
		}
		sum := `''`
		if hasSums {
			sum = `COALESCE(checksum, '')`
		}
		rows, err := q.QueryContext(ctx, `SELECT version, `+sum+` FROM "`+s.q.prefix+`migrations" ORDER BY version`)
		if err != nil {
			return st, err
		}
		defer rows.Close()
		sums := map[int]string{}
		for rows.Next() {
			var v int
			var c string
			if err := rows.Scan(&v, &c); err != nil {
				return st, err
			}
			st.Applied = append(st.Applied, v)
			st.Current = max(st.Current, v)
			sums[v] = c
		}
		if err := rows.Err(); err != nil {
			return st, err
		}
		st.Drift = sqlmigrate.Drifted(migrations, sums)
	} else if hasLeases {
		st.Legacy = true
	}
	st.Pending = sqlmigrate.Pending(migrations, st.Current)
	st.Compatible = sqlmigrate.Compatible(st.Current, st.Latest)
	return st, nil
}
