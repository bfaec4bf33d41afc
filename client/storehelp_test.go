package client_test

import (
	"testing"

	"github.com/tenurekit/tenure/store/memstore"
)

// newMem returns memstore.New(o), failing t on an error.
func newMem(t testing.TB, o *memstore.Options) *memstore.Store {
	t.Helper()
	s, err := memstore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
