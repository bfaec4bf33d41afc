package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

var unloggedOpts = &pgstore.Options{UnloggedLeases: true}

// persistenceOf returns the relpersistence of schema "tenure"'s table:
// "u" for UNLOGGED, "p" for LOGGED.
func persistenceOf(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var p string
	if err := pool.QueryRow(ctxT(t), `SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)`,
		"tenure."+table).Scan(&p); err != nil {
		t.Fatalf("persistence of %s: %v", table, err)
	}
	return p
}

// TestUnloggedLeasesMigrateAndCheck: Migrate makes the leases table
// UNLOGGED or LOGGED as the Options ask, keeping its rows; the fences table
// and the others stay logged; Check and Open refuse a table of the other
// persistence.
func TestUnloggedLeasesMigrateAndCheck(t *testing.T) {
	ctx := ctxT(t)
	pool, logged := fresh(t, nil)
	if p := persistenceOf(t, pool, "leases"); p != "p" {
		t.Fatalf("leases persistence after default Migrate = %q, want p", p)
	}
	g, err := logged.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	unlogged := newPG(t, pool, unloggedOpts)
	if err := unlogged.Check(ctx); !errors.Is(err, pgstore.ErrLeasesPersistence) {
		t.Fatalf("Check(unlogged) on a logged table = %v, want ErrLeasesPersistence", err)
	}
	if _, err := pgstore.Open(ctx, pool, unloggedOpts); !errors.Is(err, pgstore.ErrLeasesPersistence) {
		t.Fatalf("Open(unlogged) on a logged table = %v, want ErrLeasesPersistence", err)
	}
	if err := unlogged.Migrate(ctx); err != nil {
		t.Fatalf("Migrate(unlogged): %v", err)
	}
	if p := persistenceOf(t, pool, "leases"); p != "u" {
		t.Fatalf("leases persistence after Migrate(unlogged) = %q, want u", p)
	}
	for _, tbl := range []string{"fences", "idempotency", "schedule_ledger", "tenure_migrations"} {
		if p := persistenceOf(t, pool, tbl); p != "p" {
			t.Fatalf("%s persistence = %q, want p (logged)", tbl, p)
		}
	}
	if err := unlogged.Check(ctx); err != nil {
		t.Fatalf("Check(unlogged) after Migrate: %v", err)
	}
	// Any Store reads the table's persistence, whatever its Options.
	if u, err := logged.LeasesUnlogged(ctx); err != nil || !u {
		t.Fatalf("LeasesUnlogged = %v, %v; want true", u, err)
	}
	if err := logged.Check(ctx); !errors.Is(err, pgstore.ErrLeasesPersistence) {
		t.Fatalf("Check(logged) on an unlogged table = %v, want ErrLeasesPersistence", err)
	}
	info, err := unlogged.Leases().Inspect(ctx, "k")
	if err != nil || !info.Held || info.Fence != g.Fence {
		t.Fatalf("Inspect after SET UNLOGGED = %+v, %v; want held at fence %d", info, err, g.Fence)
	}
	// Migrating again changes nothing.
	if err := unlogged.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	if err := logged.Migrate(ctx); err != nil {
		t.Fatalf("Migrate(logged): %v", err)
	}
	if p := persistenceOf(t, pool, "leases"); p != "p" {
		t.Fatalf("leases persistence after Migrate(logged) = %q, want p", p)
	}
	if err := logged.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if u, err := unlogged.LeasesUnlogged(ctx); err != nil || u {
		t.Fatalf("LeasesUnlogged after SET LOGGED = %v, %v; want false", u, err)
	}
	if info, err := logged.Leases().Inspect(ctx, "k"); err != nil || info.Fence != g.Fence {
		t.Fatalf("Inspect after SET LOGGED = %+v, %v; want fence %d", info, err, g.Fence)
	}
}

// TestUnloggedLeasesNewSchema: Migrate with UnloggedLeases on an empty
// database creates the tables and the leases table UNLOGGED.
func TestUnloggedLeasesNewSchema(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	empty := newPG(t, pgxPool(t, srv.NewDatabase(t)), nil)
	if _, err := empty.LeasesUnlogged(ctxT(t)); err == nil {
		t.Fatal("LeasesUnlogged on a database without tenure's tables: no error")
	}
	pool, db := fresh(t, unloggedOpts)
	if p := persistenceOf(t, pool, "leases"); p != "u" {
		t.Fatalf("leases persistence = %q, want u", p)
	}
	if p := persistenceOf(t, pool, "fences"); p != "p" {
		t.Fatalf("fences persistence = %q, want p", p)
	}
	if _, err := pgstore.Open(ctxT(t), pool, unloggedOpts); err != nil {
		t.Fatal(err)
	}
	if err := db.Check(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// grantMany acquires and releases keys of a few kinds and returns the
// largest fence handed out, with a holder still holding key "held".
func grantMany(t *testing.T, ls lease.Store) (maxFence uint64, heldTok string) {
	t.Helper()
	ctx := ctxT(t)
	for i := range 20 {
		tok := lease.NewToken()
		k := fmt.Sprintf("k%d", i%4)
		g, err := ls.Acquire(ctx, k, tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		maxFence = max(maxFence, g.Fence)
		if err := ls.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	heldTok = lease.NewToken()
	g, err := ls.Acquire(ctx, "held", heldTok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return max(maxFence, g.Fence), heldTok
}

// afterLoss checks the store after the leases table lost its rows: every
// key is free, the holder from before cannot renew or release, and every
// new grant's fence is above every fence granted before (the clock floor),
// so a guard admits the new holder and refuses the old one.
func afterLoss(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store, maxFence uint64, heldTok string) {
	t.Helper()
	ctx := ctxT(t)
	ls := db.Leases()
	if _, err := ls.Renew(ctx, "held", heldTok, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew of a lost lease = %v, want ErrNotHeld", err)
	}
	if err := ls.Release(ctx, "held", heldTok); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release of a lost lease = %v, want ErrNotHeld", err)
	}
	for _, k := range []string{"k0", "k1", "k2", "k3", "held", "new"} {
		info, err := ls.Inspect(ctx, k)
		if err != nil || info.Held {
			t.Fatalf("Inspect(%s) after the loss = %+v, %v; want free", k, info, err)
		}
		g, err := ls.Acquire(ctx, k, lease.NewToken(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if g.Fence <= maxFence {
			t.Fatalf("fence of %s after the loss = %d, not above %d granted before", k, g.Fence, maxFence)
		}
	}
	// The fences table is logged: it kept the old holder's admission, and
	// refuses the old fence while admitting the new one.
	admit := func(f uint64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, "res", f) })
	}
	if err := admit(maxFence + 1); err != nil {
		t.Fatalf("Admit(new fence): %v", err)
	}
	if err := admit(maxFence); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(old fence) = %v, want fence.ErrStale", err)
	}
}

// TestUnloggedLeasesTruncated: what crash recovery does to an UNLOGGED
// table (it empties it) cannot make fences go back.
func TestUnloggedLeasesTruncated(t *testing.T) {
	pool, db := fresh(t, unloggedOpts)
	maxFence, heldTok := grantMany(t, db.Leases())
	if _, err := pool.Exec(ctxT(t), `TRUNCATE tenure.leases`); err != nil {
		t.Fatal(err)
	}
	afterLoss(t, pool, db, maxFence, heldTok)
}

// TestUnloggedLeasesCrash: a real crash (immediate shutdown, then crash
// recovery) empties the UNLOGGED leases table, and fences keep rising.
func TestUnloggedLeasesCrash(t *testing.T) {
	srv := testenv.Postgres(t)
	dsn := srv.NewDatabase(t)
	pool := pgxPool(t, dsn)
	db := newPG(t, pool, unloggedOpts)
	if err := db.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	maxFence, heldTok := grantMany(t, db.Leases())
	srv.StopImmediate(t)
	srv.Start(t)
	pool.Reset()
	var n int
	if err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM tenure.leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("leases rows after crash recovery = %d, want 0 (UNLOGGED)", n)
	}
	afterLoss(t, pool, db, maxFence, heldTok)
	if err := db.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}
