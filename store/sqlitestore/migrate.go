package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/tenurekit/tenure/internal/sqlmigrate"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrations are the embedded migration files, in order.
var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// PrefixPlaceholder is the text that stands for the table prefix in the
// migration files. [Migrations] and `tenure migrate sql --prefix PREFIX`
// replace it.
const PrefixPlaceholder = "{{prefix}}"

// SchemaVersion is the version of the tables this Store's code uses: the
// number of the last migration file.
var SchemaVersion = len(migrations)

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
	// [SchemaVersion], with an error wrapping [ErrSchemaVersion] that names
	// both versions.
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
	if prefix == "" {
		prefix = DefaultTablePrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return sqlmigrate.FS(migrations, PrefixPlaceholder, prefix), nil
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
// tenure before versions were recorded are adopted as version 1. Tables at
// a version newer than this code knows are refused with an error wrapping
// [ErrSchemaVersion] that names both versions, and nothing changes. No
// request path migrates.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	st, err := s.status(ctx, conn)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	if st.Current > st.Latest {
		return s.versionErr(st.Current)
	}
	for _, m := range st.Pending {
		if _, err := conn.ExecContext(ctx, sqlmigrate.Resolve(m.SQL, PrefixPlaceholder, s.q.prefix)); err != nil {
			return fmt.Errorf("sqlitestore: migration %s: %w", m.File, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	committed = true
	return nil
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

// Check returns nil if the tables are at [SchemaVersion], and otherwise an
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
		rows, err := q.QueryContext(ctx, `SELECT version FROM "`+s.q.prefix+`migrations" ORDER BY version`)
		if err != nil {
			return st, err
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return st, err
			}
			st.Applied = append(st.Applied, v)
			st.Current = max(st.Current, v)
		}
		if err := rows.Err(); err != nil {
			return st, err
		}
	} else if hasLeases {
		st.Legacy = true
	}
	st.Pending = sqlmigrate.Pending(migrations, st.Current)
	return st, nil
}
