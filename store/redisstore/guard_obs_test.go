package redisstore_test

import (
	"errors"
	"testing"
	"time"

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

	s := checked(t, newClient(t, testenv.SharedRedis(t).Addr()), nil)
	ctx := t.Context()
	res := "guard-obs-" + t.Name()
	if err := s.FencedSet(ctx, res, 5, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := s.FencedSet(ctx, res, 4, []byte("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write: %v", err)
	}
	l, err := leasetest.NewLocker(t, s.Leases(), nil).TryAcquire(ctx, res+"-k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if err := s.HolderSet(ctx, l, res+"-2", []byte("x")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a released lease wrote: %v", err)
	}
	fenced := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "redisstore", "guard": obs.GuardFencedSet})
	holder := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "redisstore", "guard": obs.GuardCheckHolder})
	if fenced != 1 || holder != 1 {
		t.Fatalf("refusals counted: fenced_set %d, check_holder %d; want 1 and 1", fenced, holder)
	}
}
