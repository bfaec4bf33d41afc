package memstore_test

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// Every write a guard refuses counts in tenure.guard.refusals, by store
// and guard.
func TestGuardRefusalsCounted(t *testing.T) {
	tl := obstest.New()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.Meter)
	defer otel.SetMeterProvider(prev)

	s := newMem(t, nil)
	ctx := t.Context()
	if err := s.FencedSet(ctx, "r", 5, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := s.FencedSet(ctx, "r", 4, []byte("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write: %v", err)
	}
	lk := leasetest.NewLocker(t, s.Leases(), nil)
	l, err := lk.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if err := s.HolderSet(ctx, l, "r2", []byte("x")); err == nil {
		t.Fatal("a released lease wrote")
	}
	fenced := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "memstore", "guard": obs.GuardFencedSet})
	holder := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "memstore", "guard": obs.GuardCheckHolder})
	if fenced != 1 || holder != 1 {
		t.Fatalf("refusals counted: fenced_set %d, check_holder %d; want 1 and 1", fenced, holder)
	}
}
