package pgstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// Every write a guard refuses counts in tenure.guard.refusals, by store
// and guard.
func TestGuardRefusalsCounted(t *testing.T) {
	tl := obstest.New()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.Meter)
	defer otel.SetMeterProvider(prev)

	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	db := newPG(t, pool, nil)
	ctx := t.Context()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	inTx := func(fn func(tx pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) }
	if err := inTx(func(tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, "ledger", 5) }); err != nil {
		t.Fatal(err)
	}
	if err := inTx(func(tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, "ledger", 4) }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale admit: %v", err)
	}
	l, err := leasetest.NewLocker(t, db.Leases(), nil).TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if err := inTx(func(tx pgx.Tx) error { return db.PgxTx(tx).CheckHolder(ctx, l) }); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("check holder of a released lease: %v", err)
	}
	admit := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "pgstore", "guard": obs.GuardAdmit})
	holder := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "pgstore", "guard": obs.GuardCheckHolder})
	if admit != 1 || holder != 1 {
		t.Fatalf("refusals counted: admit %d, check_holder %d; want 1 and 1", admit, holder)
	}
}
