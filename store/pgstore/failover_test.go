package pgstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/pgstore"
)

// A failover to a standby that lags: the standby streams through a proxy
// that holds the WAL back while the link stays up, the primary is killed
// and the standby promoted. A guard's admission and the business write it
// protects commit in one transaction, so they are lost or kept together:
// on the promoted standby the admitted fence of a resource is always that
// of its newest row. The control admits and writes in two transactions,
// and the same failover leaves a fence admitted for a write that does not
// exist.
func TestFailoverGuardAndDataTogether(t *testing.T) {
	t.Parallel() // servers of its own
	primary := testenv.Postgres(t)
	link := testenv.NewProxy(t, primary.Addr())
	standby := testenv.PostgresStandby(t, primary, link.Addr())
	dsn := primary.NewDatabase(t)
	testenv.WaitReplayed(t, primary, standby)
	pool := pgxPool(t, dsn)
	db := newPG(t, pool, nil)
	ctx := ctxT(t)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE items (resource text, fence bigint, PRIMARY KEY (resource, fence))`); err != nil {
		t.Fatal(err)
	}
	// guarded admits f for resource and writes its row in one transaction.
	guarded := func(resource string, f uint64) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := db.PgxTx(tx).Admit(ctx, resource, f); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1, $2)`, resource, int64(f))
			return err
		})
		if err != nil {
			t.Fatalf("guarded write %s %d: %v", resource, f, err)
		}
	}
	// admit and insert are the control's two transactions.
	admit := func(resource string, f uint64) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, resource, f) }); err != nil {
			t.Fatalf("admit %s %d: %v", resource, f, err)
		}
	}
	insert := func(resource string, f uint64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO items VALUES ($1, $2)`, resource, int64(f)); err != nil {
			t.Fatalf("insert %s %d: %v", resource, f, err)
		}
	}

	guarded("res", 1)
	admit("ctl", 1)
	insert("ctl", 1)
	admit("ctl", 2) // reaches the standby...
	testenv.WaitReplayed(t, primary, standby)
	link.Hold()
	insert("ctl", 2)  // ...its write does not
	guarded("res", 2) // neither does any of this
	guarded("res", 3)

	primary.Kill(t)
	standby.Promote(t)

	spool := pgxPool(t, standby.DSN(poolDatabase(t, pool)))
	state := func(resource string) (admitted, newest int64) {
		t.Helper()
		if err := spool.QueryRow(ctx, `SELECT coalesce((SELECT fence FROM tenure.fences WHERE resource = $1), 0),
			coalesce((SELECT max(fence) FROM items WHERE resource = $1), 0)`, resource).Scan(&admitted, &newest); err != nil {
			t.Fatal(err)
		}
		return admitted, newest
	}
	if a, n := state("res"); a != 1 || n != 1 {
		t.Errorf("guarded resource on the promoted standby: admitted fence %d, newest row %d; want both 1 (lost together)", a, n)
	}
	if a, n := state("ctl"); a != 2 || n != 1 {
		t.Errorf("control on the promoted standby: admitted fence %d, newest row %d; want 2 and 1 (the test could not tell them apart)", a, n)
	}
	// The promoted standby takes writes, and its guard judges them by
	// what it has: fence 2 of the guarded resource is admitted (its first
	// admission was lost with its row), the control's fence 2 is refused.
	sdb := newPG(t, spool, nil)
	err := pgx.BeginFunc(ctx, spool, func(tx pgx.Tx) error { return sdb.PgxTx(tx).Admit(ctx, "res", 2) })
	if err != nil {
		t.Errorf("guarded resource, fence 2 after the failover: %v", err)
	}
	err = pgx.BeginFunc(ctx, spool, func(tx pgx.Tx) error { return sdb.PgxTx(tx).Admit(ctx, "ctl", 2) })
	if !errors.Is(err, fence.ErrStale) {
		t.Errorf("control, fence 2 after the failover: %v, want fence.ErrStale", err)
	}
}

// poolDatabase returns the database pool is connected to.
func poolDatabase(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return pool.Config().ConnConfig.Database
}

// A lease committed before a failover is on the promoted standby when the
// standby had received it; an UNLOGGED leases table is not replicated at
// all, so there every lease is free after a failover, while fences stay
// above every fence granted before and the (logged) guard still refuses a
// holder from before.
func TestFailoverLeases(t *testing.T) {
	t.Parallel() // servers of its own
	primary := testenv.Postgres(t)
	standby := testenv.PostgresStandby(t, primary, primary.Addr())
	dsn := primary.NewDatabase(t)
	pool := pgxPool(t, dsn)
	ctx := ctxT(t)
	logged := newPG(t, pool, nil)
	unlogged := newPG(t, pool, &pgstore.Options{Schema: "tenure_unlogged", UnloggedLeases: true})
	for _, s := range []*pgstore.Store{logged, unlogged} {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	grants := map[*pgstore.Store]lease.Grant{}
	for _, s := range []*pgstore.Store{logged, unlogged} {
		g, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		grants[s] = g
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.PgxTx(tx).Admit(ctx, "r", g.Fence) }); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitReplayed(t, primary, standby)
	primary.Kill(t)
	standby.Promote(t)

	spool := pgxPool(t, standby.DSN(poolDatabase(t, pool)))
	sLogged := newPG(t, spool, nil)
	sUnlogged := newPG(t, spool, &pgstore.Options{Schema: "tenure_unlogged", UnloggedLeases: true})
	if _, err := sLogged.Leases().Acquire(ctx, "k", lease.NewToken(), time.Hour); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("logged leases after the failover: Acquire = %v, want lease.ErrHeld (the lease was replicated)", err)
	}
	g, err := sUnlogged.Leases().Acquire(ctx, "k", lease.NewToken(), time.Hour)
	if err != nil {
		t.Fatalf("UNLOGGED leases after the failover: Acquire = %v, want a grant (the table is empty on the standby)", err)
	}
	if old := grants[unlogged]; g.Fence <= old.Fence {
		t.Errorf("UNLOGGED leases after the failover: fence %d, not above the %d granted before", g.Fence, old.Fence)
	}
	err = pgx.BeginFunc(ctx, spool, func(tx pgx.Tx) error { return sUnlogged.PgxTx(tx).Admit(ctx, "r", grants[unlogged].Fence) })
	if !errors.Is(err, fence.ErrStale) {
		t.Errorf("the guard after the failover: the earlier holder's fence again = %v, want fence.ErrStale", err)
	}
	if err := pgx.BeginFunc(ctx, spool, func(tx pgx.Tx) error { return sUnlogged.PgxTx(tx).Admit(ctx, "r", g.Fence) }); err != nil {
		t.Errorf("the guard after the failover: the new holder's fence = %v", err)
	}
}
