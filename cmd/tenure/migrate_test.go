package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/cmd/tenure/internal/doctor"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func TestMigrateCommandSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	store := "sqlite:" + path
	// status on a missing file: nothing there (exit 1), and no file made.
	_, err := run("migrate", "status", "--store", store)
	var e exitErr
	if !errors.As(err, &e) || e.code != 1 {
		t.Fatalf("status on a missing file: %v, want exit 1", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("status created the file: %v", err)
	}
	var st statusOut
	if code := runJSON(t, &st, "migrate", "up", "--store", store); code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	if st.Current != sqlitestore.SchemaVersion || len(st.Pending) != 0 {
		t.Fatalf("after up: %+v", st)
	}
	out, err := run("migrate", "status", "--store", store)
	if err != nil || !strings.Contains(out, "VERSION") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.New(t.Context(), db, nil); err != nil {
		t.Fatalf("New (which only checks) on the migrated file: %v", err)
	}
	if len(st.Drift) != 0 {
		t.Fatalf("drift on a fresh file: %v", st.Drift)
	}
	// A version applied from another text of its file shows as drift.
	if _, err := db.Exec(`UPDATE tenure_migrations SET checksum = 'edited' WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	if code := runJSON(t, &st, "migrate", "status", "--store", store); code != 0 || !slices.Equal(st.Drift, []int{2}) {
		t.Fatalf("status after an edited version 2: exit %d, drift %v", code, st.Drift)
	}
	if out, err := run("migrate", "status", "--store", store); err != nil || !strings.Contains(out, "drift:") || !strings.Contains(out, "version 2 was applied from another text") {
		t.Fatalf("status text: %v\n%s", err, out)
	}
}

func TestMigrateCommandPostgres(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	dsn := srv.NewDatabase(t)
	var st statusOut
	if code := runJSON(t, &st, "migrate", "status", "--store", dsn, "--schema", "ops"); code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	if st.Current != 0 || len(st.Pending) != pgstore.SchemaVersion {
		t.Fatalf("status of an empty database: %+v", st)
	}
	if code := runJSON(t, &st, "migrate", "up", "--store", dsn, "--schema", "ops"); code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	if st.Current != pgstore.SchemaVersion || len(st.Pending) != 0 || len(st.Applied) != pgstore.SchemaVersion {
		t.Fatalf("after up: %+v", st)
	}
	pool := pgxPool(t, dsn)
	if _, err := pgstore.Open(t.Context(), pool, &pgstore.Options{Schema: "ops"}); err != nil {
		t.Fatalf("Open after migrate up: %v", err)
	}
	// An UNLOGGED leases table stays UNLOGGED.
	unlogged := &pgstore.Options{Schema: "ops", UnloggedLeases: true}
	ust, err := pgstore.New(pool, unlogged)
	if err != nil {
		t.Fatal(err)
	}
	if err := ust.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := runJSON(t, &st, "migrate", "up", "--store", dsn, "--schema", "ops"); code != 0 {
		t.Fatalf("up on an unlogged leases table: exit %d", code)
	}
	if _, err := pgstore.Open(t.Context(), pool, unlogged); err != nil {
		t.Fatalf("Open(unlogged) after migrate up: %v", err)
	}
	// A newer version is an error naming both.
	if _, err := pool.Exec(t.Context(), `INSERT INTO ops.tenure_migrations (version, name) VALUES (999, 'x')`); err != nil {
		t.Fatal(err)
	}
	_, err = run("migrate", "up", "--store", dsn, "--schema", "ops")
	if err == nil || !strings.Contains(err.Error(), "version 999") {
		t.Fatalf("up on a newer schema: %v", err)
	}
}

func TestMigrateSQLCommand(t *testing.T) {
	out, err := run("migrate", "sql", "--store", "postgres://localhost/x", "--schema", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "-- file: 0001_initial.up.sql") || !strings.Contains(out, `CREATE TABLE IF NOT EXISTS "billing".leases`) ||
		strings.Contains(out, pgstore.SchemaPlaceholder) {
		t.Fatalf("migrate sql output:\n%.600s", out)
	}
	dir := t.TempDir()
	if _, err := run("migrate", "sql", "--store", "sqlite:x.db", "--table-prefix", "app_", "--out", dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "0001_initial.up.sql"))
	if err != nil || !strings.Contains(string(b), `"app_leases"`) {
		t.Fatalf("written file: %v\n%.300s", err, b)
	}
	// --out alone writes the up files only (goose reads one file per
	// version); with --down, the down files too.
	if _, err := os.Stat(filepath.Join(dir, "0001_initial.down.sql")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--out wrote a down file: %v", err)
	}
	both := t.TempDir()
	if _, err := run("migrate", "sql", "--store", "sqlite:x.db", "--out", both, "--down"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"0001_initial.up.sql", "0001_initial.down.sql", "0006_migration_checksums.down.sql"} {
		if _, err := os.Stat(filepath.Join(both, name)); err != nil {
			t.Fatalf("--out --down wrote no %s: %v", name, err)
		}
	}
	out, err = run("migrate", "sql", "--store", "postgres://localhost/x", "--down")
	if err != nil || !strings.HasPrefix(out, "-- file: "+fmtDown(pgstore.SchemaVersion)) || strings.Contains(out, ".up.sql") {
		t.Fatalf("migrate sql --down: %v\n%.300s", err, out)
	}
	if _, err := run("migrate", "sql", "--store", "postgres://localhost/x", "--schema", "Bad-Name"); err == nil {
		t.Fatal("a bad schema name was accepted")
	}
}

// migrate down undoes one version by default, prints the plan on
// --dry-run without changing anything, is refused (exit 1, nothing
// changed) when it would drop what a guarantee rests on, and runs with
// --force.
func TestMigrateDownCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	store := "sqlite:" + path
	var st statusOut
	if code := runJSON(t, &st, "migrate", "up", "--store", store); code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	latest := sqlitestore.SchemaVersion
	var d downOut
	if code := runJSON(t, &d, "migrate", "down", "--store", store, "--dry-run"); code != 0 || !d.DryRun || d.From != latest || d.To != latest-1 || len(d.Undo) != 1 {
		t.Fatalf("down --dry-run: exit %d, %+v", code, d)
	}
	if code := runJSON(t, &st, "migrate", "status", "--store", store); code != 0 || st.Current != latest {
		t.Fatalf("after a dry run: %+v", st)
	}
	out, err := run("migrate", "down", "--store", store)
	if err != nil || !strings.Contains(out, "undid 1 migrations (version "+strconv.Itoa(latest)+" to "+strconv.Itoa(latest-1)+")") {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if code := runJSON(t, &st, "migrate", "status", "--store", store); code != 0 || st.Current != latest-1 || len(st.Pending) != 1 {
		t.Fatalf("after down: %+v", st)
	}
	if _, err := run("migrate", "up", "--store", store); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO tenure_fences (resource, fence) VALUES ('orders', 7)`); err != nil {
		t.Fatal(err)
	}
	out, err = run("migrate", "down", "--store", store, "--to", "0")
	var e exitErr
	if !errors.As(err, &e) || e.code != 1 || !strings.Contains(err.Error(), "version 1 would drop 1 fence guard rows") ||
		!strings.Contains(out, "refused to undo") {
		t.Fatalf("down --to 0 with a fence row: %v\n%s", err, out)
	}
	if code := runJSON(t, &st, "migrate", "status", "--store", store); code != 0 || st.Current != latest {
		t.Fatalf("after a refused down: %+v", st)
	}
	for _, args := range [][]string{{"--to", "-1"}, {"--to", strconv.Itoa(latest + 1)}} {
		_, err := run(append([]string{"migrate", "down", "--store", store}, args...)...)
		if !errors.As(err, &e) || e.code != 2 {
			t.Fatalf("down %v: %v, want exit 2", args, err)
		}
	}
	if code := runJSON(t, &d, "migrate", "down", "--store", store, "--to", "0", "--force"); code != 0 || !d.Forced || len(d.Lost) != 1 {
		t.Fatalf("down --force: exit %d, %+v", code, d)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'tenure_%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables left after down --to 0 --force: %d, %v", n, err)
	}
}

// doctor's schema check names the recorded version and says when it is
// behind or ahead of this tenure.
func TestDoctorReportsSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	if _, err := run("migrate", "up", "--store", "sqlite:"+path); err != nil {
		t.Fatal(err)
	}
	rep, _, _ := doctorJSON(t, "--store", "sqlite:"+path)
	if f := finding(rep, "schema"); f.Status != doctor.OK || !strings.Contains(f.Detail, "version "+strconv.Itoa(sqlitestore.SchemaVersion)) {
		t.Fatalf("schema finding on a current file: %+v", f)
	}
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO tenure_migrations (version, name, applied_us) VALUES (99, 'x', 0)`); err != nil {
		t.Fatal(err)
	}
	rep, _, _ = doctorJSON(t, "--store", "sqlite:"+path)
	if f := finding(rep, "schema"); f.Status != doctor.Unsafe || !strings.Contains(f.Detail, "version 99") {
		t.Fatalf("schema finding on a newer file: %+v", f)
	}
}

// fmtDown is the name prefix of version v's down file.
func fmtDown(v int) string {
	return fmt.Sprintf("%04d_", v)
}
