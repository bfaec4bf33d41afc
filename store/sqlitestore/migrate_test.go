package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func recorded(t *testing.T, db *sql.DB, prefix string) []int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM "`+prefix+`migrations" ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func allVersions() []int {
	var out []int
	for v := 1; v <= sqlitestore.SchemaVersion; v++ {
		out = append(out, v)
	}
	return out
}

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A file whose tables were created before versions were recorded
// (version 1, exactly as Open created them then) is migrated to the
// current version by Open, with its rows kept; New only checks.
func TestOpenUpgradesUnversionedFile(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	raw := rawDB(t, path)
	v1, err := os.ReadFile("testdata/schema_v1_unversioned.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, strings.ReplaceAll(string(v1), sqlitestore.PrefixPlaceholder, "tenure_")); err != nil {
		t.Fatalf("create the version 1 tables: %v", err)
	}
	far := time.Now().Add(time.Hour).UnixMicro()
	_, err = raw.ExecContext(ctx, `
INSERT INTO tenure_leases ("key", token, fence, expires_us) VALUES ('held', 'tok-held', 41, ?1), ('released', NULL, 77, NULL);
INSERT INTO tenure_fences (resource, fence) VALUES ('orders/1', 41);
INSERT INTO tenure_sessions (id, user_id, data, version, created_us, idle_us, absolute_us) VALUES ('s1', 'u1', x'00', 3, 1, ?1, ?1);
INSERT INTO tenure_schedule_ledger (job, slot_id, fence, completed_us) VALUES ('job', 'slot-1', 5, 1);`, far)
	if err != nil {
		t.Fatal(err)
	}
	// New checks and refuses, naming both versions, and changes nothing.
	_, err = sqlitestore.New(ctx, raw, nil)
	if !errors.Is(err, sqlitestore.ErrSchemaVersion) || !strings.Contains(err.Error(), "version 0") ||
		!strings.Contains(err.Error(), "version "+strconv.Itoa(sqlitestore.SchemaVersion)) {
		t.Fatalf("New on version 1 tables = %v, want ErrSchemaVersion naming 0 and %d", err, sqlitestore.SchemaVersion)
	}
	skip, err := sqlitestore.New(ctx, raw, &sqlitestore.Options{Migrate: sqlitestore.MigrateSkip})
	if err != nil {
		t.Fatal(err)
	}
	st, err := skip.MigrationStatus(ctx)
	if err != nil || !st.Legacy || st.Current != 0 || len(st.Pending) != sqlitestore.SchemaVersion {
		t.Fatalf("status = %+v, %v; want legacy at 0 with every migration pending", st, err)
	}
	s := open(t, path, nil)
	if got := recorded(t, raw, "tenure_"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions %v, want %v", got, allVersions())
	}
	info, err := s.Leases().Inspect(ctx, "held")
	if err != nil || !info.Held || info.Fence != 41 {
		t.Fatalf("Inspect(held) = %+v, %v", info, err)
	}
	// Migration 5 dropped the ended lease's row and raised the fence floor
	// to its fence.
	info, err = s.Leases().Inspect(ctx, "released")
	if err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Inspect(released) = %+v, %v; want the row dropped", info, err)
	}
	var floor int64
	if err := raw.QueryRowContext(ctx, `SELECT fence FROM tenure_lease_fence_floor`).Scan(&floor); err != nil || floor != 77 {
		t.Fatalf("fence floor %d, %v; want 77", floor, err)
	}
	var n int
	if err := raw.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM tenure_fences WHERE fence = 41) + (SELECT count(*) FROM tenure_sessions WHERE version = 3)
		+ (SELECT count(*) FROM tenure_schedule_ledger) + (SELECT count(*) FROM tenure_leases WHERE expires_us IS NULL)`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("kept rows: %d, %v", n, err)
	}
	g, err := s.Leases().Acquire(ctx, "released", lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= 77 {
		t.Fatalf("Acquire(released) = %+v, %v", g, err)
	}
	// Now New's check passes.
	if _, err := sqlitestore.New(ctx, raw, nil); err != nil {
		t.Fatalf("New after Open migrated: %v", err)
	}
}

// Tables recorded at a newer version are refused by Open, New and
// Migrate, with both versions named.
func TestNewerVersionRefused(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	open(t, path, nil).Close()
	raw := rawDB(t, path)
	newer := sqlitestore.SchemaVersion + 4
	if _, err := raw.ExecContext(ctx, `INSERT INTO tenure_migrations (version, name, applied_us) VALUES (?1, 'from_the_future', 0)`, newer); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sqlitestore.ErrSchemaVersion) {
			t.Fatalf("%s = %v, want ErrSchemaVersion", what, err)
		}
		for _, v := range []int{newer, sqlitestore.SchemaVersion} {
			if !strings.Contains(err.Error(), "version "+strconv.Itoa(v)) {
				t.Fatalf("%s: %q does not name version %d", what, err, v)
			}
		}
	}
	_, err := sqlitestore.Open(ctx, path, nil)
	check("Open", err)
	_, err = sqlitestore.New(ctx, raw, nil)
	check("New", err)
	_, err = sqlitestore.New(ctx, raw, &sqlitestore.Options{Migrate: sqlitestore.MigrateApply})
	check("New with MigrateApply", err)
	if got, want := recorded(t, raw, "tenure_"), append(allVersions(), newer); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
}

// The exported files, applied in order as another tool would, give tables
// New accepts without migrating.
func TestMigrationsAppliedByAnotherTool(t *testing.T) {
	ctx := t.Context()
	raw := rawDB(t, tempPath(t))
	fsys, err := sqlitestore.Migrations("app_")
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(fsys, "*.up.sql")
	if len(names) != sqlitestore.SchemaVersion {
		t.Fatalf("files %v", names)
	}
	slices.Sort(names)
	for _, name := range names {
		b, _ := fs.ReadFile(fsys, name)
		if strings.Contains(string(b), sqlitestore.PrefixPlaceholder) {
			t.Fatalf("%s still holds the placeholder", name)
		}
		if _, err := raw.ExecContext(ctx, string(b)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	s, err := sqlitestore.New(ctx, raw, &sqlitestore.Options{TablePrefix: "app_"})
	if err != nil {
		t.Fatalf("New after applying the files: %v", err)
	}
	if _, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlitestore.Migrations("bad-prefix"); err == nil {
		t.Fatal("Migrations(bad prefix) succeeded")
	}
}

// Several connections and two OS processes open one new file at once:
// each migration is applied and recorded once.
func TestOpenConcurrentlyMigratesOnce(t *testing.T) {
	path := tempPath(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command(exe, "-test.run=^TestOpenChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TENURE_SQLITE_CHILD_PATH="+path)
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := sqlitestore.Open(context.Background(), path, nil)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child process %d: %v", i, err)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
	}
	if got := recorded(t, rawDB(t, path), "tenure_"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions %v, want %v", got, allVersions())
	}
}

// TestOpenChildProcess is a second process of
// TestOpenConcurrentlyMigratesOnce; it does nothing on its own.
func TestOpenChildProcess(t *testing.T) {
	path := os.Getenv("TENURE_SQLITE_CHILD_PATH")
	if path == "" {
		t.Skip("run by TestOpenConcurrentlyMigratesOnce")
	}
	s, err := sqlitestore.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
