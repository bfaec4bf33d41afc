package pgstore_test

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// tables lists schema.table for every table named leases or fences.
func tables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT table_schema || '.' || table_name FROM information_schema.tables
WHERE table_name IN ('leases', 'fences') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func schemas(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT nspname FROM pg_namespace ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// works acquires, admits and releases through db.
func works(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store) {
	t.Helper()
	ctx := ctxT(t)
	tok := lease.NewToken()
	g, err := db.Leases().Acquire(ctx, "k", tok, time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	err = inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, "r", g.Fence) })
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if err := db.Leases().Release(ctx, "k", tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestMigrateTwice(t *testing.T) {
	pool, db := fresh(t, nil)
	works(t, pool, db)
	if err := db.Migrate(ctxT(t)); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if got, want := tables(t, pool), []string{"tenure.fences", "tenure.leases"}; !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	// Data survives a second Migrate.
	info, err := db.Leases().Inspect(ctxT(t), "k")
	if err != nil || info.Fence == 0 {
		t.Fatalf("Inspect after Migrate: %+v, %v", info, err)
	}
	works(t, pool, db)
}

// Several processes migrating the same fresh database at once: each uses
// a pool of its own.
func TestMigrateConcurrently(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	dsn := srv.NewDatabase(t)
	const procs = 6
	for _, schema := range []string{"tenure", "one", "two"} {
		var wg sync.WaitGroup
		errs := make([]error, procs)
		start := make(chan struct{})
		stores := make([]*pgstore.Store, procs)
		for i := range procs {
			pool := pgxPool(t, dsn)
			if err := pool.Ping(ctxT(t)); err != nil { // connect ahead of the start
				t.Fatal(err)
			}
			stores[i] = newPG(t, pool, &pgstore.Options{Schema: schema})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = stores[i].Migrate(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("schema %s: Migrate %d: %v", schema, i, err)
			}
		}
	}
	pool := pgxPool(t, dsn)
	want := []string{"one.fences", "one.leases", "tenure.fences", "tenure.leases", "two.fences", "two.leases"}
	if got := tables(t, pool); !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	works(t, pool, newPG(t, pool, &pgstore.Options{Schema: "two"}))
}

func TestCustomSchema(t *testing.T) {
	pool, db := fresh(t, &pgstore.Options{Schema: "locks_v2"})
	if db.Schema() != "locks_v2" {
		t.Fatalf("Schema() = %q", db.Schema())
	}
	works(t, pool, db)
	if got, want := tables(t, pool), []string{"locks_v2.fences", "locks_v2.leases"}; !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	var n int
	if err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM locks_v2.leases WHERE key = 'k'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("locks_v2.leases rows for k: %d, %v", n, err)
	}
	// The default schema is a separate namespace.
	def := newPG(t, pool, nil)
	if def.Schema() != pgstore.DefaultSchema {
		t.Fatalf("default Schema() = %q", def.Schema())
	}
	if err := def.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if info, err := def.Leases().Inspect(ctxT(t), "k"); err != nil || info.Fence != 0 {
		t.Fatalf("default schema sees %+v, %v", info, err)
	}
}

func TestBadSchemaWritesNothing(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	before := schemas(t, pool)
	bad := []string{
		"Tenure", "ten-ure", "1tenure", "tenure;drop", `te"nure`, "tenure.x", " tenure",
		"ténure", "pg_tenure", strings.Repeat("a", 64), "a\x00b",
	}
	for _, name := range bad {
		wantBad := func(what string, s *pgstore.Store, err error) {
			t.Helper()
			if s != nil || !errors.Is(err, tenure.ErrInvalid) || !strings.Contains(err.Error(), "schema name") {
				t.Errorf("schema %q: %s: %v, %v; want a schema name error wrapping tenure.ErrInvalid", name, what, s, err)
			}
		}
		o := &pgstore.Options{Schema: name}
		s, err := pgstore.New(pool, o)
		wantBad("New", s, err)
		s, err = pgstore.Open(ctx, pool, o)
		wantBad("Open", s, err)
		sqlDB := stdlib.OpenDBFromPool(pool)
		s, err = pgstore.NewDB(sqlDB, o)
		wantBad("NewDB", s, err)
		s, err = pgstore.OpenDB(ctx, sqlDB, o)
		wantBad("OpenDB", s, err)
		sqlDB.Close()
	}
	if after := schemas(t, pool); !slices.Equal(before, after) {
		t.Fatalf("schemas changed from %v to %v", before, after)
	}
	if got := tables(t, pool); len(got) != 0 {
		t.Fatalf("tables created: %v", got)
	}
	// Positive control: the longest legal name works.
	long := strings.Repeat("a", 63)
	db := newPG(t, pool, &pgstore.Options{Schema: long})
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("schema of 63 bytes: %v", err)
	}
	works(t, pool, db)
	if got, want := tables(t, pool), []string{long + ".fences", long + ".leases"}; !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
}

func TestNotMigratedIsAPlainError(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	db := newPG(t, pool, nil)
	_, err := db.Leases().Acquire(ctxT(t), "k", lease.NewToken(), time.Second)
	if err == nil || errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Acquire before Migrate: %v, want a plain error", err)
	}
	if !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Acquire before Migrate: %q does not say to run Migrate", err)
	}
	_, err = db.Leases().Inspect(ctxT(t), "k")
	if err == nil || errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Inspect before Migrate: %v, want a plain error", err)
	}
	t.Log("error before Migrate:", err)
}
