package pgstore_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/sqlmigrate"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// schemaShape is every table's columns, every index, sequence and
// function of schema, as text, so that two schemas can be compared.
func schemaShape(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `
SELECT 'column ' || table_name::text || '.' || column_name::text || ' ' || data_type || ' null=' || is_nullable || ' default=' || coalesce(column_default, '')
	FROM information_schema.columns WHERE table_schema = $1
UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1
UNION ALL SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
UNION ALL SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
	FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// Every down file gives back exactly the schema of the version below it:
// going down one version at a time from the latest, the schema matches a
// fresh one migrated up to that version (with the exported files, as
// another tool would), down to no tables at all; and it migrates up again.
func TestMigrateDownEveryVersion(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	db := newPG(t, pool, nil)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	fsys, err := pgstore.Migrations("ref")
	if err != nil {
		t.Fatal(err)
	}
	ups, _ := fs.Glob(fsys, "*.up.sql")
	slices.Sort(ups)
	strip := func(lines []string, schema string) []string {
		out := make([]string, len(lines))
		for i, l := range lines {
			out[i] = strings.ReplaceAll(l, schema+".", "S.")
		}
		return out
	}
	for v := pgstore.SchemaVersion - 1; v >= 0; v-- {
		if _, err := db.MigrateDown(ctx, v, false); err != nil {
			t.Fatalf("MigrateDown(%d): %v", v, err)
		}
		ref := fmt.Sprintf("ref%d", v)
		if _, err := pool.Exec(ctx, `CREATE SCHEMA `+ref); err != nil {
			t.Fatal(err)
		}
		for _, name := range ups[:v] {
			b, _ := fs.ReadFile(fsys, name)
			if _, err := pool.Exec(ctx, strings.ReplaceAll(string(b), `"ref"`, ref)); err != nil {
				t.Fatalf("apply %s: %v", name, err)
			}
		}
		if got, want := strip(schemaShape(t, pool, "tenure"), "tenure"), strip(schemaShape(t, pool, ref), ref); !slices.Equal(got, want) {
			t.Fatalf("after MigrateDown(%d) the schema is\n%s\nwant that of version %d:\n%s", v, strings.Join(got, "\n"), v, strings.Join(want, "\n"))
		}
		st, err := db.MigrationStatus(ctx)
		if err != nil || st.Current != v {
			t.Fatalf("MigrationStatus after MigrateDown(%d) = %+v, %v", v, st, err)
		}
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from no tables: %v", err)
	}
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions after migrating up again %v", got)
	}
	if _, err := db.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute); err != nil {
		t.Fatalf("Acquire after migrating up again: %v", err)
	}
}

// A down migration that would drop what a guarantee rests on is refused,
// naming it, and changes nothing; forced, it runs.
func TestMigrateDownGuards(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	db := newPG(t, pool, nil)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tok := lease.NewToken()
	if _, err := db.Leases().Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.schedule_ledger (job, slot_id, fence, completed_at) VALUES ('nightly', 's1', 1, clock_timestamp());
INSERT INTO tenure.session_users (user_id, generation) VALUES ('alice', 1)`); err != nil {
		t.Fatal(err)
	}
	before := schemaShape(t, pool, "tenure")
	plan, lost, err := db.MigrateDownPlan(ctx, 0)
	if err != nil || len(plan) != pgstore.SchemaVersion || plan[0].Version != pgstore.SchemaVersion {
		t.Fatalf("MigrateDownPlan(0) = %d migrations, %v", len(plan), err)
	}
	_, err = db.MigrateDown(ctx, 0, false)
	var ref *pgstore.Refusal
	if !errors.Is(err, pgstore.ErrDownRefused) || !errors.As(err, &ref) || !slices.Equal(ref.Lost, lost) || len(lost) != 3 {
		t.Fatalf("MigrateDown(0) = %v, want a Refusal listing %+v", err, lost)
	}
	for _, want := range []string{"1 lease rows", "1 ledger rows of completed schedule slots", "1 revocations of users' sessions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), tok) {
		t.Errorf("refusal %q shows a token", err)
	}
	if got := schemaShape(t, pool, "tenure"); !slices.Equal(got, before) {
		t.Fatal("a refused MigrateDown changed the schema")
	}
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions after a refused MigrateDown %v", got)
	}

	ahead := time.Now().Add(24 * time.Hour).UnixMicro()
	if _, err := pool.Exec(ctx, `UPDATE tenure.lease_fence_floor SET fence = $1`, ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MigrateDown(ctx, 4, false); !errors.Is(err, pgstore.ErrDownRefused) || !strings.Contains(err.Error(), "version 5 would drop 1 fence floor") {
		t.Fatalf("MigrateDown(4) with a floor ahead of the clock = %v, want refused", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tenure.lease_fence_floor SET fence = 5`); err != nil {
		t.Fatal(err)
	}
	if lost, err := db.MigrateDown(ctx, 4, false); err != nil || len(lost) != 0 {
		t.Fatalf("MigrateDown(4) with a floor below the clock = %+v, %v", lost, err)
	}
	for _, to := range []int{-1, 5} {
		if _, err := db.MigrateDown(ctx, to, true); !errors.Is(err, tenure.ErrInvalid) {
			t.Errorf("MigrateDown(%d) at version 4 = %v, want ErrInvalid", to, err)
		}
	}
	if lost, err := db.MigrateDown(ctx, 0, true); err != nil || len(lost) != 3 {
		t.Fatalf("forced MigrateDown(0) = %+v, %v", lost, err)
	}
	if got := schemaShape(t, pool, "tenure"); len(got) != 0 {
		t.Fatalf("left after MigrateDown(0): %v", got)
	}
}

// The code runs on a schema one version newer than its own (a newer
// tenure migrated it during a rolling upgrade, with an expand-only
// migration): Migrate, Check and Open accept it and change nothing, and
// the store works; two versions newer is refused.
func TestRunsOnTheNextVersion(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	if err := newPG(t, pool, nil).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	next := pgstore.SchemaVersion + 1
	expand := `ALTER TABLE tenure.leases ADD COLUMN IF NOT EXISTS note text;
CREATE TABLE IF NOT EXISTS tenure.extra (id bigint PRIMARY KEY);`
	if c := sqlmigrate.Contracting(expand); len(c) != 0 {
		t.Fatalf("the test's migration is not expand-only: %q", c)
	}
	if _, err := pool.Exec(ctx, expand); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.tenure_migrations (version, name) VALUES ($1, 'next')`, next); err != nil {
		t.Fatal(err)
	}
	before := schemaShape(t, pool, "tenure")
	db, err := pgstore.Open(ctx, pool, nil)
	if err != nil {
		t.Fatalf("Open at version %d: %v", next, err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate at version %d: %v", next, err)
	}
	st, err := db.MigrationStatus(ctx)
	if err != nil || !st.Compatible || st.Current != next || len(st.Pending) != 0 {
		t.Fatalf("MigrationStatus = %+v, %v", st, err)
	}
	if got := schemaShape(t, pool, "tenure"); !slices.Equal(got, before) {
		t.Fatal("Migrate changed a schema of the next version")
	}
	t1, t2 := lease.NewToken(), lease.NewToken()
	g1, err := db.Leases().Acquire(ctx, "k", t1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Leases().Acquire(ctx, "k", t2, time.Minute); err == nil {
		t.Fatal("a second holder on a schema of the next version")
	}
	if err := db.Leases().Release(ctx, "k", t1); err != nil {
		t.Fatal(err)
	}
	g2, err := db.Leases().Acquire(ctx, "k", t2, time.Minute)
	if err != nil || g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after %d, %v", g2.Fence, g1.Fence, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.tenure_migrations (version, name) VALUES ($1, 'after_next')`, next+1); err != nil {
		t.Fatal(err)
	}
	if err := db.Check(ctx); !errors.Is(err, pgstore.ErrSchemaVersion) {
		t.Fatalf("Check two versions ahead = %v, want ErrSchemaVersion", err)
	}
	if _, err := db.MigrateDown(ctx, pgstore.SchemaVersion, false); !errors.Is(err, pgstore.ErrSchemaVersion) {
		t.Fatalf("MigrateDown from a version this code has no down file for = %v, want ErrSchemaVersion", err)
	}
}

// Migrations from the first one the compatibility window covers are
// expand-only, so the code of the version before runs on their schema.
func TestMigrationsAreExpandOnly(t *testing.T) {
	const windowStart = 6 // versions 1 to 5 came before the window
	fsys := pgstore.MigrationFiles()
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
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	s := newPG(t, pool, nil)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := sqlmigrate.Load(os.DirFS("migrations"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		var sum string
		if err := pool.QueryRow(ctx, `SELECT checksum FROM tenure.tenure_migrations WHERE version = $1`, m.Version).Scan(&sum); err != nil {
			t.Fatalf("version %d: %v", m.Version, err)
		}
		if sum != sqlmigrate.Checksum(m) {
			t.Fatalf("version %d recorded checksum %q, want %q", m.Version, sum, sqlmigrate.Checksum(m))
		}
	}
	if st, err := s.MigrationStatus(ctx); err != nil || len(st.Drift) != 0 {
		t.Fatalf("fresh: %+v, %v", st, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tenure.tenure_migrations SET checksum = 'edited' WHERE version = 3`); err != nil {
		t.Fatal(err)
	}
	// A version applied by another tool has no checksum: unverified, not
	// drift; and a Migrate with nothing to apply writes nothing.
	if _, err := pool.Exec(ctx, `UPDATE tenure.tenure_migrations SET checksum = NULL WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var unset bool
	if err := pool.QueryRow(ctx, `SELECT checksum IS NULL FROM tenure.tenure_migrations WHERE version = 2`).Scan(&unset); err != nil || !unset {
		t.Fatalf("Migrate at the latest version wrote a checksum for version 2 (%v)", err)
	}
	if st, err := s.MigrationStatus(ctx); err != nil || !slices.Equal(st.Drift, []int{3}) {
		t.Fatalf("after a version built from another file: Drift %v, %v; want [3]", st.Drift, err)
	}
	if _, err := s.MigrateDown(ctx, 5, false); err != nil {
		t.Fatal(err)
	}
	if st, err := s.MigrationStatus(ctx); err != nil || st.Current != 5 || len(st.Drift) != 0 {
		t.Fatalf("at version 5: %+v, %v", st, err)
	}
}
