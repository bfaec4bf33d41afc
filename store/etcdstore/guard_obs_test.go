package etcdstore_test

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/internal/testenv"
)

// Every write the fenced put refuses counts in tenure.guard.refusals.
func TestGuardRefusalsCounted(t *testing.T) {
	tl := obstest.New()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.Meter)
	defer otel.SetMeterProvider(prev)

	es := newEtcd(t, newClient(t, testenv.Etcd(t).Endpoints()...), nil)
	ctx := t.Context()
	if err := es.FencedPut(ctx, "r", "new", 5); err != nil {
		t.Fatal(err)
	}
	for _, f := range []uint64{4, 0} {
		if err := es.FencedPut(ctx, "r", "late", f); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale put with fence %d: %v", f, err)
		}
	}
	if n := tl.Count(t, obs.GuardRefusals, map[string]string{"store": "etcdstore", "guard": obs.GuardFencedSet}); n != 2 {
		t.Fatalf("refusals counted: %d, want 2", n)
	}
}
