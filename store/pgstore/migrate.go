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

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/sqlmigrate"
)

//go:embed migrations/*.sql
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
	return resolvedFiles(schema, sqlmigrate.FS)
}

// resolvedFiles returns files (sqlmigrate.FS or DownFS) of the
// migrations for schema ("" means DefaultSchema), checked first.
func resolvedFiles(schema string, files func([]sqlmigrate.Migration, string, string) fs.FS) (fs.FS, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validateSchema(schema); err != nil {
		return nil, err
	}
	return files(migrations, SchemaPlaceholder, pgx.Identifier{schema}.Sanitize()), nil
}

// DownMigrations returns the down files for the schema named schema (""
// means DefaultSchema), with the placeholder resolved:
// NNNN_name.down.sql, each ending with the statement that removes its
// version. Next to [Migrations]' files they are golang-migrate's layout.
// Another tool runs no guard: count what a file's "tenure:guard-sql"
// comments count before applying it, or use [Store.MigrateDown].
func DownMigrations(schema string) (fs.FS, error) {
	return resolvedFiles(schema, sqlmigrate.DownFS)
}

// MigrationFiles returns the embedded migration files as they are, with
// [SchemaPlaceholder] standing for the quoted schema name.
func MigrationFiles() fs.FS {
	sub, _ := fs.Sub(migrationFiles, "migrations")
	return sub
}

// Open returns a Store on pool (see [New]) after checking that the schema
// in o is at [SchemaVersion] or up to [SchemaWindow] above it: a schema
// older than that or newer,
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
// versions were recorded are adopted as version 1. A schema up to
// [SchemaWindow] versions newer (migrated by a newer tenure during a
// rolling upgrade) is left as it is; one newer than that is refused with
// an error wrapping [ErrSchemaVersion] that names both versions, and
// nothing changes.
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
		if st.Current > st.Latest+SchemaWindow {
			return s.versionErr(st.Current)
		}
		quoted := pgx.Identifier{s.schema}.Sanitize()
		for _, m := range st.Pending {
			if _, err := tx.exec(ctx, sqlmigrate.Resolve(m.SQL, SchemaPlaceholder, quoted)); err != nil {
				return fmt.Errorf("migration %s: %w", m.File, err)
			}
		}
		// The versions this call applies get this code's checksum, in
		// the same transaction; versions applied otherwise stay
		// unverified (no checksum).
		if len(st.Pending) > 0 && st.Pending[len(st.Pending)-1].Version >= checksumVersion {
			for _, m := range st.Pending {
				if _, err := tx.exec(ctx, `UPDATE `+quoted+`.tenure_migrations SET checksum = $2 WHERE version = $1`,
					m.Version, sqlmigrate.Checksum(m)); err != nil {
					return fmt.Errorf("record the checksum of %s: %w", m.File, err)
				}
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

// checksumVersion is the migration that adds the checksum column of
// tenure_migrations.
const checksumVersion = 6

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

// Check returns nil if the schema is at [SchemaVersion] (or up to
// [SchemaWindow] versions above it) and its leases
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
		// The checksum column came with migration 6; to_jsonb reads it
		// where it is and gives NULL where it is not.
		sums := map[int]string{}
		err := q.query(ctx, `SELECT version, COALESCE(to_jsonb(m)->>'checksum', '') FROM `+pgx.Identifier{s.schema}.Sanitize()+`.tenure_migrations m ORDER BY version`, nil,
			func(scan func(dest ...any) error) error {
				var v int32
				var sum string
				if err := scan(&v, &sum); err != nil {
					return err
				}
				st.Applied = append(st.Applied, int(v))
				st.Current = max(st.Current, int(v))
				sums[int(v)] = sum
				return nil
			})
		if err != nil {
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

// MigrateDownPlan returns the migrations [Store.MigrateDown] would undo to
// take the schema to version to, newest first, and what their down files'
// guards count that would be lost. It only reads.
func (s *Store) MigrateDownPlan(ctx context.Context, to int) ([]Migration, []Loss, error) {
	var plan []Migration
	var lost []Loss
	err := s.db.inTx(ctx, func(tx querier) error {
		var err error
		plan, lost, err = s.downPlan(ctx, tx, to)
		return err
	})
	if err != nil {
		return nil, nil, s.downErr(ctx, err)
	}
	return plan, lost, nil
}

// MigrateDown takes the schema down to version to (0: no tenure tables
// left), running the down files of the versions above it, newest first, in
// one transaction under the same advisory lock as [Store.Migrate]. Before
// it changes anything it runs the guards of those down files; if any
// counts rows a guarantee rests on (fences, ledger rows, revocations), it
// returns a *[Refusal] wrapping [ErrDownRefused] that lists them and
// changes nothing, unless force is set. It returns what the guards
// counted (what a forced run dropped). A to below 0 or above the schema's
// version is an error wrapping tenure.ErrInvalid.
//
// Run it with the newer tenure before starting the older one: the down
// files of a version are in the code that applied it.
func (s *Store) MigrateDown(ctx context.Context, to int, force bool) ([]Loss, error) {
	var lost []Loss
	err := s.db.inTx(ctx, func(tx querier) error {
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey(s.schema)); err != nil {
			return err
		}
		plan, l, err := s.downPlan(ctx, tx, to)
		if err != nil {
			return err
		}
		lost = l
		if len(lost) > 0 && !force {
			return &Refusal{Store: "pgstore", Lost: lost}
		}
		quoted := pgx.Identifier{s.schema}.Sanitize()
		for _, m := range plan {
			if _, err := tx.exec(ctx, sqlmigrate.Resolve(m.Down, SchemaPlaceholder, quoted)); err != nil {
				return fmt.Errorf("migration %s: %w", m.DownFile, err)
			}
		}
		return nil
	})
	if err != nil {
		return lost, s.downErr(ctx, err)
	}
	return lost, nil
}

func (s *Store) downErr(ctx context.Context, err error) error {
	if errors.Is(err, ErrDownRefused) || errors.Is(err, ErrSchemaVersion) || errors.Is(err, tenure.ErrInvalid) {
		return err
	}
	return s.wrap(ctx, "migrate down schema "+s.schema, err)
}

// downPlan is the plan of MigrateDown and what its guards count.
func (s *Store) downPlan(ctx context.Context, q querier, to int) ([]Migration, []Loss, error) {
	st, err := s.status(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	if to < 0 || to > st.Current {
		return nil, nil, fmt.Errorf("pgstore: migrate down to version %d: schema %q is at version %d: %w", to, s.schema, st.Current, tenure.ErrInvalid)
	}
	plan, err := sqlmigrate.DownPlan(migrations, st.Current, to)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: schema %q: %w", s.schema, err)
	}
	quoted := pgx.Identifier{s.schema}.Sanitize()
	var lost []Loss
	for _, m := range plan {
		for _, g := range m.Guards {
			var n int64
			if err := q.queryRow(ctx, sqlmigrate.Resolve(g.SQL, SchemaPlaceholder, quoted), nil, &n); err != nil {
				return nil, nil, fmt.Errorf("guard %q of %s: %w", g.What, m.DownFile, err)
			}
			if n > 0 {
				lost = append(lost, Loss{Version: m.Version, What: g.What, Rows: n})
			}
		}
	}
	return plan, lost, nil
}
