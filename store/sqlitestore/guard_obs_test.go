package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// Every write a guard refuses counts in tenure.guard.refusals, by store
// and guard.
func TestGuardRefusalsCounted(t *testing.T) {
	tl := obstest.New()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.Meter)
	defer otel.SetMeterProvider(prev)

	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "g.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	inTx := func(fn func(tx *sql.Tx) error) error {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	if err := inTx(func(tx *sql.Tx) error { return s.Tx(tx).Admit(ctx, "ledger", 5) }); err != nil {
		t.Fatal(err)
	}
	if err := inTx(func(tx *sql.Tx) error { return s.Tx(tx).Admit(ctx, "ledger", 4) }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale admit: %v", err)
	}
	l, err := leasetest.NewLocker(t, s.Leases(), nil).TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.WithoutCancel(ctx))
	if err := inTx(func(tx *sql.Tx) error { return s.Tx(tx).CheckHolder(ctx, l) }); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("check holder of a released lease: %v", err)
	}
	admit := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "sqlitestore", "guard": obs.GuardAdmit})
	holder := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "sqlitestore", "guard": obs.GuardCheckHolder})
	if admit != 1 || holder != 1 {
		t.Fatalf("refusals counted: admit %d, check_holder %d; want 1 and 1", admit, holder)
	}
}
