package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// DoTx's calls in the caller's transaction are timed in
// tenure.store.duration, as the Keeper's other store calls are.
func TestDoTxCallsTimed(t *testing.T) {
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "i.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tl := obstest.New()
	k, err := idempotency.New(s.Idempotency(), &idempotency.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = k.DoTx(t.Context(), s.Tx(tx).Idempotency(), idempotency.Request{Scope: "s", Key: "k", Fingerprint: "f"},
		func(context.Context, *idempotency.Claim) ([]byte, error) { return []byte("ok"), nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"idempotency.tx_claim", "idempotency.tx_complete"} {
		if n := tl.Observations(t, "tenure.store.duration", map[string]string{"store": "sqlitestore", "op": op, "outcome": "ok"}); n != 1 {
			t.Errorf("store.duration{op=%s} has %d observations, want 1", op, n)
		}
	}
}
