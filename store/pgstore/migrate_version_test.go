package pgstore_test

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/pgstore"
)

// versions returns the versions recorded in schema.tenure_migrations.
func versions(t *testing.T, pool *pgxpool.Pool, schema string) []int {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT version FROM `+schema+`.tenure_migrations ORDER BY version`)
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
	for v := 1; v <= pgstore.SchemaVersion; v++ {
		out = append(out, v)
	}
	return out
}

// A database whose tables were created before versions were recorded
// (version 1, exactly as Migrate created it then) is migrated to the
// current version with its rows kept.
func TestMigrateUpgradesUnversionedSchema(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	v1, err := os.ReadFile("testdata/schema_v1_unversioned.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, strings.ReplaceAll(string(v1), pgstore.SchemaPlaceholder, `"tenure"`)); err != nil {
		t.Fatalf("create the version 1 schema: %v", err)
	}
	_, err = pool.Exec(ctx, `
INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES
	('held', 'tok-held', 41, clock_timestamp() + interval '1 hour'),
	('released', NULL, 77, NULL);
INSERT INTO tenure.fences (resource, fence) VALUES ('orders/1', 41);
INSERT INTO tenure.sessions (id, user_id, data, version, created_at, idle_until, absolute_until)
	VALUES ('s1', 'u1', 'data', 3, clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() + interval '2 hours');
INSERT INTO tenure.schedule_ledger (job, slot_id, fence, completed_at) VALUES ('job', 'slot-1', 5, clock_timestamp())`)
	if err != nil {
		t.Fatal(err)
	}
	db := newPG(t, pool, nil)
	st, err := db.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Legacy || st.Current != 0 || len(st.Pending) != pgstore.SchemaVersion {
		t.Fatalf("status before Migrate = %+v, want legacy at 0 with every migration pending", st)
	}
	err = db.Check(ctx)
	if !errors.Is(err, pgstore.ErrSchemaVersion) || !strings.Contains(err.Error(), "version 0") ||
		!strings.Contains(err.Error(), "version "+strconv.Itoa(pgstore.SchemaVersion)) {
		t.Fatalf("Check before Migrate = %v, want ErrSchemaVersion naming versions 0 and %d", err, pgstore.SchemaVersion)
	}
	if _, err := pgstore.Open(ctx, pool, nil); !errors.Is(err, pgstore.ErrSchemaVersion) {
		t.Fatalf("Open before Migrate = %v, want ErrSchemaVersion", err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("recorded versions %v, want %v", got, allVersions())
	}
	if err := db.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
	// The rows are kept.
	info, err := db.Leases().Inspect(ctx, "held")
	if err != nil || !info.Held || info.Fence != 41 {
		t.Fatalf("Inspect(held) = %+v, %v; want held at fence 41", info, err)
	}
	info, err = db.Leases().Inspect(ctx, "released")
	if err != nil || info.Held || info.Fence != 77 {
		t.Fatalf("Inspect(released) = %+v, %v; want free at fence 77", info, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenure.fences WHERE fence = 41) + (SELECT count(*) FROM tenure.sessions WHERE version = 3)
	+ (SELECT count(*) FROM tenure.schedule_ledger) + (SELECT count(*) FROM tenure.leases WHERE expires_at IS NULL)`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("kept rows: %d, %v; want the fence, session and ledger rows, and no lease row without an end time", n, err)
	}
	// The next tenure of a released key follows its fence.
	g, err := db.Leases().Acquire(ctx, "released", lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= 77 {
		t.Fatalf("Acquire(released) = %+v, %v; want a fence above 77", g, err)
	}
	// A second Migrate finds nothing to do.
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("recorded versions after a second Migrate %v", got)
	}
}

// A schema recorded at a version newer than the code knows is refused by
// Migrate, Check and Open, with both versions named, and left unchanged.
func TestNewerSchemaVersionRefused(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	newer := pgstore.SchemaVersion + 7
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.tenure_migrations (version, name) VALUES ($1, 'from_the_future')`, newer); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Migrate": db.Migrate(ctx),
		"Check":   db.Check(ctx),
		"Open":    func() error { _, err := pgstore.Open(ctx, pool, nil); return err }(),
	} {
		if !errors.Is(err, pgstore.ErrSchemaVersion) {
			t.Fatalf("%s = %v, want ErrSchemaVersion", name, err)
		}
		for _, v := range []int{newer, pgstore.SchemaVersion} {
			if !strings.Contains(err.Error(), "version "+strconv.Itoa(v)) {
				t.Fatalf("%s error %q does not name version %d", name, err, v)
			}
		}
	}
	if got, want := versions(t, pool, "tenure"), append(allVersions(), newer); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
}

// The exported files, applied as another tool would (each file as is, in
// order), give a schema the Store accepts.
func TestMigrationsAppliedByAnotherTool(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	fsys, err := pgstore.Migrations("billing_locks")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.up.sql")
	if err != nil || len(names) != pgstore.SchemaVersion {
		t.Fatalf("files %v, %v; want %d", names, err, pgstore.SchemaVersion)
	}
	slices.Sort(names)
	for i, name := range names {
		if !strings.HasPrefix(name, strconv.Itoa(10000 + i + 1)[1:]+"_") {
			t.Fatalf("file %d is %s", i, name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), pgstore.SchemaPlaceholder) {
			t.Fatalf("%s still holds the placeholder", name)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	db, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: "billing_locks"})
	if err != nil {
		t.Fatalf("Open after applying the files: %v", err)
	}
	works(t, pool, db)
	if _, err := pgstore.Migrations("Bad-Name"); !errors.Is(err, tenure.ErrInvalid) {
		t.Fatalf("Migrations(bad name) = %v, want tenure.ErrInvalid", err)
	}
}

// Two goroutines with separate pools and two OS processes migrate one
// database at once: each version is applied once and recorded once.
func TestMigrateConcurrentlyRecordsOnce(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	dsn := srv.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i := range errs {
		pool := pgxPool(t, dsn)
		if err := pool.Ping(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		db := newPG(t, pool, nil)
		wg.Go(func() {
			<-start
			errs[i] = db.Migrate(context.Background())
		})
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command(exe, "-test.run=^TestMigrateChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TENURE_MIGRATE_CHILD_DSN="+dsn)
		cmds = append(cmds, cmd)
	}
	close(start)
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child process %d: %v", i, err)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Migrate %d: %v", i, err)
		}
	}
	pool := pgxPool(t, dsn)
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions %v, want %v", got, allVersions())
	}
	works(t, pool, newPG(t, pool, nil))
}

// TestMigrateChildProcess is the second process of
// TestMigrateConcurrentlyRecordsOnce; it does nothing on its own.
func TestMigrateChildProcess(t *testing.T) {
	dsn := os.Getenv("TENURE_MIGRATE_CHILD_DSN")
	if dsn == "" {
		t.Skip("run by TestMigrateConcurrentlyRecordsOnce")
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := newPG(t, pool, nil).Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// A schema at version 4 migrates to version 5 with its lease rows kept
// and a fence floor of 0, a single row; applying the file again (as
// another tool might) leaves a floor a sweep raised where it is.
func TestMigrateFenceFloor(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	fsys, err := pgstore.Migrations("tenure")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.up.sql")
	slices.Sort(names)
	if err != nil || len(names) < 5 || names[4] != "0005_lease_fence_floor.up.sql" {
		t.Fatalf("files %v, %v; want 0005_lease_fence_floor.up.sql fifth", names, err)
	}
	for _, name := range names[:4] {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES ('released', NULL, 77, clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	db := newPG(t, pool, nil)
	if err := db.Check(ctx); !errors.Is(err, pgstore.ErrSchemaVersion) {
		t.Fatalf("Check at version 4 = %v, want ErrSchemaVersion", err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, pool, "tenure"); !slices.Equal(got, allVersions()) {
		t.Fatalf("versions %v, want %v", got, allVersions())
	}
	var rows, floor int64
	if err := pool.QueryRow(ctx, `SELECT count(*), max(fence) FROM tenure.lease_fence_floor`).Scan(&rows, &floor); err != nil || rows != 1 || floor != 0 {
		t.Fatalf("fence floor after Migrate: %d rows, fence %d, %v; want one row at 0", rows, floor, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.lease_fence_floor (id, fence) VALUES (false, 1)`); err == nil {
		t.Fatal("a second fence floor row was accepted")
	}
	if info, err := db.Leases().Inspect(ctx, "released"); err != nil || info.Held || info.Fence != 77 {
		t.Fatalf("Inspect(released) after Migrate = %+v, %v; want free at 77", info, err)
	}
	if r, err := db.Sweep(ctx, retention.Options{}); err != nil || r.Deleted[retention.Leases] != 1 {
		t.Fatalf("Sweep = %+v, %v; want the released row deleted", r, err)
	}
	b, err := fs.ReadFile(fsys, names[4])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(b)); err != nil {
		t.Fatalf("apply %s again: %v", names[4], err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), max(fence) FROM tenure.lease_fence_floor`).Scan(&rows, &floor); err != nil || rows != 1 || floor != 77 {
		t.Fatalf("fence floor after the file was applied again: %d rows, fence %d, %v; want one row at 77", rows, floor, err)
	}
	if g, err := db.Leases().Acquire(ctx, "released", lease.NewToken(), time.Minute); err != nil || g.Fence <= 77 {
		t.Fatalf("Acquire(released) after the sweep = %+v, %v; want a fence above 77", g, err)
	}
}
