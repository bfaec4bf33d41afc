package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

func someBinder(*sql.Tx) idempotency.Tx { return nil }

// TestTxMiddlewareInvalid checks that TxMiddleware refuses a nil Keeper,
// database or binder and bad options with ErrInvalid.
func TestTxMiddlewareInvalid(t *testing.T) {
	k, err := idempotency.New(newMem(t, nil).Idempotency(), nil)
	if err != nil {
		t.Fatal(err)
	}
	db := &sql.DB{}
	var nilKeeper *idempotency.Keeper
	for name, f := range map[string]func() error{
		"nil keeper": func() error { _, err := nilKeeper.TxMiddleware(db, someBinder, nil); return err },
		"nil db":     func() error { _, err := k.TxMiddleware(nil, someBinder, nil); return err },
		"nil binder": func() error { _, err := k.TxMiddleware(db, nil, nil); return err },
		"bad options": func() error {
			_, err := k.TxMiddleware(db, someBinder, &idempotency.HTTPOptions{MaxBodyBytes: -1})
			return err
		},
	} {
		if err := f(); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, ok := idempotency.TxFromContext(context.Background()); ok {
		t.Fatal("TxFromContext found a transaction in an empty context")
	}
}

// TestMiddlewareStoreErrorsReleases5xx checks that a 5xx response is never
// recorded, also on a Keeper whose Options.Errors is StoreErrors: the
// retry runs the handler again.
func TestMiddlewareStoreErrorsReleases5xx(t *testing.T) {
	k, err := idempotency.New(newMem(t, nil).Idempotency(), &idempotency.Options{Errors: idempotency.StoreErrors})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := k.Middleware(&idempotency.HTTPOptions{Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	codes := []int{}
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
		r.Header.Set(idempotency.HeaderKey, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if codes[0] != http.StatusBadGateway || codes[1] != http.StatusCreated || codes[2] != http.StatusCreated || runs != 2 {
		t.Fatalf("codes %v, runs %d; want 502, 201, 201 (replayed) and 2 runs", codes, runs)
	}
}
