package sqlitestore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// A stale fence refused by Admit is counted in tenure.guard.refusals on
// the global provider.
func TestGuardRefusalCounted(t *testing.T) {
	tl := obstest.New()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.Meter)
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.Tx(tx).Admit(ctx, "invoice-7", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Tx(tx).Admit(ctx, "invoice-7", 3); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale fence: %v", err)
	}
	if got := tl.Count(t, "tenure.guard.refusals", map[string]string{"store": "sqlitestore", "guard": "admit"}); got != 1 {
		t.Errorf("guard.refusals = %d, want 1", got)
	}
}
