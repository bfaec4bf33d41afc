package sqlitestore_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/sqlmigrate"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// shape is every tenure table's columns and every index, as text, so that
// two databases can be compared.
func shape(t *testing.T, db *sql.DB, prefix string) []string {
	t.Helper()
	ctx := t.Context()
	rows, err := db.QueryContext(ctx, `SELECT type, name, tbl_name FROM sqlite_master WHERE name LIKE ?1 || '%' AND name NOT LIKE 'sqlite_%' ORDER BY name`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	type obj struct{ typ, name, tbl string }
	var objs []obj
	for rows.Next() {
		var o obj
		if err := rows.Scan(&o.typ, &o.name, &o.tbl); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	rows.Close()
	var out []string
	for _, o := range objs {
		out = append(out, o.typ+" "+o.name+" on "+o.tbl)
		if o.typ != "table" {
			continue
		}
		cols, err := db.QueryContext(ctx, `SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(?1) ORDER BY cid`, o.name)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var name, typ, dflt string
			var notnull, pk int
			if err := cols.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("  %s.%s %s notnull=%d default=%q pk=%d", o.name, name, typ, notnull, dflt, pk))
		}
		cols.Close()
	}
	return out
}

// applyUpTo applies the exported up files 1..v to db, as another tool would.
func applyUpTo(t *testing.T, db *sql.DB, prefix string, v int) {
	t.Helper()
	fsys, err := sqlitestore.Migrations(prefix)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(fsys, "*.up.sql")
	slices.Sort(names)
	for _, name := range names[:v] {
		b, _ := fs.ReadFile(fsys, name)
		if _, err := db.ExecContext(t.Context(), string(b)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
}

// Every down file gives back exactly the tables of the version below it:
// going down one version at a time from the latest, the tables match those
// of a fresh database migrated up to that version, down to no tables at
// all; and the tables migrate up again.
func TestMigrateDownEveryVersion(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := open(t, path, nil)
	db := rawDB(t, path)
	for v := sqlitestore.SchemaVersion - 1; v >= 0; v-- {
		if _, err := s.MigrateDown(ctx, v, false); err != nil {
			t.Fatalf("MigrateDown(%d): %v", v, err)
		}
		ref := rawDB(t, tempPath(t))
		applyUpTo(t, ref, "tenure_", v)
		if got, want := shape(t, db, "tenure_"), shape(t, ref, "tenure_"); !slices.Equal(got, want) {
			t.Fatalf("after MigrateDown(%d) the tables are\n%s\nwant those of version %d:\n%s", v, strings.Join(got, "\n"), v, strings.Join(want, "\n"))
		}
		st, err := s.MigrationStatus(ctx)
		if err != nil || st.Current != v {
			t.Fatalf("MigrationStatus after MigrateDown(%d) = %+v, %v", v, st, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from no tables: %v", err)
	}
	if got, want := recorded(t, db, "tenure_"), allVersions(); !slices.Equal(got, want) {
		t.Fatalf("versions after migrating up again %v, want %v", got, want)
	}
	if _, err := s.Leases().Acquire(ctx, "k", "t1", time.Minute); err != nil {
		t.Fatalf("Acquire after migrating up again: %v", err)
	}
}

// A down migration that would drop what a guarantee rests on is refused,
// naming it, and changes nothing; forced, it runs.
func TestMigrateDownGuards(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := open(t, path, nil)
	db := rawDB(t, path)
	if _, err := s.Leases().Acquire(ctx, "k", "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO tenure_schedule_ledger (job, slot_id, fence, completed_us) VALUES ('nightly', 's1', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	before := shape(t, db, "tenure_")
	plan, lost, err := s.MigrateDownPlan(ctx, 0)
	if err != nil || len(plan) != sqlitestore.SchemaVersion || plan[0].Version != sqlitestore.SchemaVersion {
		t.Fatalf("MigrateDownPlan(0) = %d migrations, %v", len(plan), err)
	}
	_, err = s.MigrateDown(ctx, 0, false)
	var ref *sqlitestore.Refusal
	if !errors.Is(err, sqlitestore.ErrDownRefused) || !errors.As(err, &ref) || !slices.Equal(ref.Lost, lost) {
		t.Fatalf("MigrateDown(0) = %v, want a Refusal listing %+v", err, lost)
	}
	for _, want := range []string{"1 lease rows", "1 ledger rows of completed schedule slots"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "t1") {
		t.Errorf("refusal %q shows a token", err)
	}
	if got := shape(t, db, "tenure_"); !slices.Equal(got, before) {
		t.Fatal("a refused MigrateDown changed the tables")
	}
	if got, want := recorded(t, db, "tenure_"), allVersions(); !slices.Equal(got, want) {
		t.Fatalf("versions after a refused MigrateDown %v, want %v", got, want)
	}

	// The fence floor may go while it is below the clock, not when it is
	// ahead of it.
	ahead := time.Now().Add(24 * time.Hour).UnixMicro()
	if _, err := db.ExecContext(ctx, `UPDATE tenure_lease_fence_floor SET fence = ?1`, ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateDown(ctx, 4, false); !errors.Is(err, sqlitestore.ErrDownRefused) || !strings.Contains(err.Error(), "version 5 would drop 1 fence floor") {
		t.Fatalf("MigrateDown(4) with a floor ahead of the clock = %v, want refused", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE tenure_lease_fence_floor SET fence = 5`); err != nil {
		t.Fatal(err)
	}
	if lost, err := s.MigrateDown(ctx, 4, false); err != nil || len(lost) != 0 {
		t.Fatalf("MigrateDown(4) with a floor below the clock = %+v, %v", lost, err)
	}

	for _, to := range []int{-1, 5} {
		if _, err := s.MigrateDown(ctx, to, true); !errors.Is(err, tenure.ErrInvalid) {
			t.Errorf("MigrateDown(%d) at version 4 = %v, want ErrInvalid", to, err)
		}
	}
	lost, err = s.MigrateDown(ctx, 0, true)
	if err != nil || len(lost) != 2 {
		t.Fatalf("forced MigrateDown(0) = %+v, %v", lost, err)
	}
	if got := shape(t, db, "tenure_"); len(got) != 0 {
		t.Fatalf("tables left after MigrateDown(0): %v", got)
	}
}

// The code runs on tables one version newer than its own (a newer tenure
// migrated them during a rolling upgrade, with an expand-only migration):
// Open, Check and Migrate accept them and change nothing, and the store
// works; two versions newer is refused.
func TestRunsOnTheNextVersion(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	open(t, path, nil).Close()
	db := rawDB(t, path)
	next := sqlitestore.SchemaVersion + 1
	expand := `ALTER TABLE tenure_leases ADD COLUMN note TEXT;
CREATE TABLE IF NOT EXISTS tenure_extra (id INTEGER PRIMARY KEY);`
	if c := sqlmigrate.Contracting(expand); len(c) != 0 {
		t.Fatalf("the test's migration is not expand-only: %q", c)
	}
	if _, err := db.ExecContext(ctx, expand); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO tenure_migrations (version, name, applied_us) VALUES (?1, 'next', 0)`, next); err != nil {
		t.Fatal(err)
	}
	before := shape(t, db, "tenure_")
	s := open(t, path, nil)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check at version %d: %v", next, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate at version %d: %v", next, err)
	}
	st, err := s.MigrationStatus(ctx)
	if err != nil || !st.Compatible || st.Current != next || len(st.Pending) != 0 {
		t.Fatalf("MigrationStatus = %+v, %v", st, err)
	}
	if got := shape(t, db, "tenure_"); !slices.Equal(got, before) {
		t.Fatal("Migrate changed tables of the next version")
	}
	g1, err := s.Leases().Acquire(ctx, "k", "t1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Leases().Acquire(ctx, "k", "t2", time.Minute); err == nil {
		t.Fatal("a second holder on tables of the next version")
	}
	if err := s.Leases().Release(ctx, "k", "t1"); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Leases().Acquire(ctx, "k", "t2", time.Minute)
	if err != nil || g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after %d, %v", g2.Fence, g1.Fence, err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO tenure_migrations (version, name, applied_us) VALUES (?1, 'after_next', 0)`, next+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); !errors.Is(err, sqlitestore.ErrSchemaVersion) {
		t.Fatalf("Check two versions ahead = %v, want ErrSchemaVersion", err)
	}
	if _, err := s.MigrateDown(ctx, sqlitestore.SchemaVersion, false); !errors.Is(err, sqlitestore.ErrSchemaVersion) {
		t.Fatalf("MigrateDown from a version this code has no down file for = %v, want ErrSchemaVersion", err)
	}
}

// Migrations from the first one the compatibility window covers are
// expand-only, so the code of the version before runs on their tables.
func TestMigrationsAreExpandOnly(t *testing.T) {
	const windowStart = 6 // versions 1 to 5 came before the window
	fsys := sqlitestore.MigrationFiles()
	names, _ := fs.Glob(fsys, "*.up.sql")
	slices.Sort(names)
	for i, name := range names {
		if i+1 < windowStart {
			continue
		}
		b, _ := fs.ReadFile(fsys, name)
		if c := sqlmigrate.Contracting(string(b)); len(c) != 0 {
			t.Errorf("%s is not expand-only (the code of version %d could not run on it): %q", name, i, c)
		}
	}
}

// TestMigrationChecksums: Migrate records the checksum of each version it
// applies, the status reports a version built from another text, and a
// Migrate with nothing to apply writes nothing.
func TestMigrationChecksums(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := open(t, path, nil)
	db := rawDB(t, path)
	ms, err := sqlmigrate.Load(os.DirFS("migrations"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		var sum string
		if err := db.QueryRowContext(ctx, `SELECT checksum FROM tenure_migrations WHERE version = ?1`, m.Version).Scan(&sum); err != nil {
			t.Fatalf("version %d: %v", m.Version, err)
		}
		if sum != sqlmigrate.Checksum(m) {
			t.Fatalf("version %d recorded checksum %q, want %q", m.Version, sum, sqlmigrate.Checksum(m))
		}
	}
	if st, err := s.MigrationStatus(ctx); err != nil || len(st.Drift) != 0 {
		t.Fatalf("fresh: %+v, %v", st, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE tenure_migrations SET checksum = 'edited' WHERE version = 3`); err != nil {
		t.Fatal(err)
	}
	// A version applied by another tool has no checksum: unverified, not
	// drift; and a Migrate with nothing to apply writes nothing.
	if _, err := db.ExecContext(ctx, `UPDATE tenure_migrations SET checksum = NULL WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var unset bool
	if err := db.QueryRowContext(ctx, `SELECT checksum IS NULL FROM tenure_migrations WHERE version = 2`).Scan(&unset); err != nil || !unset {
		t.Fatalf("Migrate at the latest version wrote a checksum for version 2 (%v)", err)
	}
	if st, err := s.MigrationStatus(ctx); err != nil || !slices.Equal(st.Drift, []int{3}) {
		t.Fatalf("after a version built from another file: Drift %v, %v; want [3]", st.Drift, err)
	}
	// A schema rolled back below the checksum column reports no drift.
	if _, err := s.MigrateDown(ctx, 5, false); err != nil {
		t.Fatal(err)
	}
	if st, err := s.MigrationStatus(ctx); err != nil || st.Current != 5 || len(st.Drift) != 0 {
		t.Fatalf("at version 5: %+v, %v", st, err)
	}
}
