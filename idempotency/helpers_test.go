package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

// newKeeper returns a Keeper on s, failing t if New refuses it.
func newKeeper(t testing.TB, s idempotency.Store, o *idempotency.Options) *idempotency.Keeper {
	t.Helper()
	k, err := idempotency.New(s, o)
	if err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	return k
}

// middleware returns k's middleware, failing t if it refuses o.
func middleware(t testing.TB, k *idempotency.Keeper, o *idempotency.HTTPOptions) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := k.Middleware(o)
	if err != nil {
		t.Fatalf("Middleware: %v", err)
	}
	return mw.Handler
}
