package pgstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/sqlmigrate"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrations are the embedded migration files, in order.
var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// SchemaPlaceholder is the text that stands for the quoted schema name in
// the migration files. [Migrations] and `tenure migrate sql --schema NAME`
// replace it.
const SchemaPlaceholder = "{{schema}}"

// SchemaVersion is the version of the schema this Store's code uses: the
// number of the last migration file. A Store refuses (see [Store.Check])
// a schema at another version.
var SchemaVersion = len(migrations)

// ErrSchemaVersion reports a schema whose recorded version is not
// [SchemaVersion]. The error names both versions.
var ErrSchemaVersion = sqlmigrate.ErrVersion

// ErrLeasesPersistence reports a leases table that is LOGGED while the
// Store's Options.UnloggedLeases asks for UNLOGGED, or the other way
// round. [Store.Migrate] changes the table to match.
var ErrLeasesPersistence = errors.New("leases table persistence differs from Options.UnloggedLeases")

// Migration is one numbered migration file (NNNN_name.up.sql).
type Migration = sqlmigrate.Migration

// MigrationStatus compares what a schema holds with the migrations this
// Store's code knows.
type MigrationStatus = sqlmigrate.Status

// Migrations returns the migration files for the schema named schema
// ("" means DefaultSchema), with the placeholder resolved: plain
// NNNN_name.up.sql files, each ending with the statement that records its
// version, as goose, golang-migrate or atlas apply them. Apply them in
// order; a team whose service role has no DDL rights applies them with
// its own tool and the service only runs [Store.Check]. An invalid schema
// name is an error wrapping tenure.ErrInvalid.
func Migrations(schema string) (fs.FS, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validateSchema(schema); err != nil {
		return nil, err
	}
	return sqlmigrate.FS(migrations, SchemaPlaceholder, pgx.Identifier{schema}.Sanitize()), nil
}

// MigrationFiles returns the embedded migration files as they are, with
// [SchemaPlaceholder] standing for the quoted schema name.
func MigrationFiles() fs.FS {
	sub, _ := fs.Sub(migrationFiles, "migrations")
	return sub
}

// Open returns a Store on pool (see [New]) after checking that the schema
// in o is at [SchemaVersion]: a schema older or newer than this code knows,
// or one without tenure's tables, is an error wrapping [ErrSchemaVersion]
// that names both versions. A nil pool or a bad option is an error
// wrapping tenure.ErrInvalid, as from New. It does not change the database;
// run [Store.Migrate] (or apply [Migrations] with your own tool) first.
func Open(ctx context.Context, pool *pgxpool.Pool, o *Options) (*Store, error) {
	s, err := New(pool, o)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenDB is [Open] on a database/sql handle (see [NewDB]).
func OpenDB(ctx context.Context, db *sql.DB, o *Options) (*Store, error) {
	s, err := NewDB(db, o)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// migrateLockKey is the advisory lock that serializes Migrate per schema
// and database.
func migrateLockKey(schema string) int64 {
	h := fnv.New64a()
	io.WriteString(h, "tenure/pgstore/migrate\x00"+schema)
	return int64(h.Sum64())
}

// Migrate applies the migrations the schema has not recorded yet, in order,
// in one transaction under a transaction-scoped advisory lock (per schema
// and database), so it is safe to run from several processes at once: one
// applies them, the others wait and find nothing left to do. It creates the
// schema if it does not exist and keeps the rows in existing tables. Then
// it makes the leases table UNLOGGED or LOGGED as Options.UnloggedLeases
// asks, if it is not already (ALTER TABLE ... SET UNLOGGED / SET LOGGED:
// the table is rewritten under an exclusive lock, briefly blocking lease
// calls; its rows are kept). A schema at [SchemaVersion] whose leases
// table already has that persistence is left untouched (and needs no
// privileges beyond reading the version table and the catalog). The
// migration files ([Migrations]) create a logged table; a team that
// applies them with its own tool and wants an unlogged one runs
// ALTER TABLE <schema>.leases SET UNLOGGED itself. Tables created by tenure before
// versions were recorded are adopted as version 1. A schema at a version
// newer than this code knows is refused with an error wrapping
// [ErrSchemaVersion] that names both versions, and nothing changes.
//
// No other call of the Store migrates: the request paths never change the
// schema.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.db.inTx(ctx, func(tx querier) error {
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey(s.schema)); err != nil {
			return err
		}
		st, err := s.status(ctx, tx)
		if err != nil {
			return err
		}
		if st.Current > st.Latest {
			return s.versionErr(st.Current)
		}
		quoted := pgx.Identifier{s.schema}.Sanitize()
		for _, m := range st.Pending {
			if _, err := tx.exec(ctx, sqlmigrate.Resolve(m.SQL, SchemaPlaceholder, quoted)); err != nil {
				return fmt.Errorf("migration %s: %w", m.File, err)
			}
		}
		unlogged, err := s.leasesUnlogged(ctx, tx)
		if err != nil {
			return err
		}
		if unlogged != s.unlogged {
			to := persistence(s.unlogged)
			if _, err := tx.exec(ctx, `ALTER TABLE `+quoted+`.leases SET `+to); err != nil {
				return fmt.Errorf("make leases table %s: %w", to, err)
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSchemaVersion) {
			return err
		}
		return s.wrap(ctx, "migrate schema "+s.schema, err)
	}
	return nil
}

func (s *Store) versionErr(current int) error {
	return sqlmigrate.Check("pgstore", fmt.Sprintf("schema %q", s.schema), current, SchemaVersion)
}

// MigrationStatus reports the schema's recorded version, the versions it
// recorded and the migrations it lacks. It only reads.
func (s *Store) MigrationStatus(ctx context.Context) (MigrationStatus, error) {
	st, err := s.status(ctx, s.db)
	if err != nil {
		return MigrationStatus{}, s.wrap(ctx, "migration status of schema "+s.schema, err)
	}
	return st, nil
}

// Check returns nil if the schema is at [SchemaVersion] and its leases
// table is UNLOGGED exactly when Options.UnloggedLeases says so. A schema
// at another version is an error wrapping [ErrSchemaVersion] that names the
// schema's version and the one this code needs (a schema without tenure's
// tables is version 0); a leases table of the other persistence is an error
// wrapping [ErrLeasesPersistence] that names both. It only reads. Call it at
// start-up when the service does not run Migrate.
func (s *Store) Check(ctx context.Context) error {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	if err := s.versionErr(st.Current); err != nil {
		return err
	}
	unlogged, err := s.leasesUnlogged(ctx, s.db)
	if err != nil {
		return s.wrap(ctx, "check schema "+s.schema, err)
	}
	if unlogged != s.unlogged {
		return fmt.Errorf("pgstore: schema %q: leases table is %s, Options.UnloggedLeases is %t: %w (run Migrate with the same Options, or change them)",
			s.schema, persistence(unlogged), s.unlogged, ErrLeasesPersistence)
	}
	return nil
}

func persistence(unlogged bool) string {
	if unlogged {
		return "UNLOGGED"
	}
	return "LOGGED"
}

// LeasesUnlogged reports whether the schema's leases table is UNLOGGED
// (see Options.UnloggedLeases), whatever the Store's Options say. It only
// reads. A schema without a leases table is an error.
func (s *Store) LeasesUnlogged(ctx context.Context) (bool, error) {
	u, err := s.leasesUnlogged(ctx, s.db)
	if err != nil {
		return false, s.wrap(ctx, "leases table persistence in schema "+s.schema, err)
	}
	return u, nil
}

// leasesUnlogged reports whether the schema's leases table is UNLOGGED.
func (s *Store) leasesUnlogged(ctx context.Context, q querier) (bool, error) {
	var p string
	err := q.queryRow(ctx, `SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass(format('%I.leases', $1::text))`,
		[]any{s.schema}, &p)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("no leases table in schema %q (run Migrate)", s.schema)
	}
	if err != nil {
		return false, err
	}
	return p == "u", nil
}

func (s *Store) status(ctx context.Context, q querier) (MigrationStatus, error) {
	st := MigrationStatus{Latest: SchemaVersion}
	var hasVersions, hasLeases bool
	err := q.queryRow(ctx, `SELECT to_regclass(format('%I.tenure_migrations', $1::text)) IS NOT NULL,
	to_regclass(format('%I.leases', $1::text)) IS NOT NULL`, []any{s.schema}, &hasVersions, &hasLeases)
	if err != nil {
		return st, err
	}
	if hasVersions {
		err := q.query(ctx, `SELECT version FROM `+pgx.Identifier{s.schema}.Sanitize()+`.tenure_migrations ORDER BY version`, nil,
			func(scan func(dest ...any) error) error {
				var v int32
				if err := scan(&v); err != nil {
					return err
				}
				st.Applied = append(st.Applied, int(v))
				st.Current = max(st.Current, int(v))
				return nil
			})
		if err != nil {
			return st, err
		}
	} else if hasLeases {
		st.Legacy = true
	}
	st.Pending = sqlmigrate.Pending(migrations, st.Current)
	return st, nil
}
