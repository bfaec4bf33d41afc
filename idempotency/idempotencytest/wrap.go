package idempotencytest

import (
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/storekit"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break: it is
// storetest.NewFaults().Idempotency(s), returned with its faults.
func Wrap(s idempotency.Store) (idempotency.Store, Faults) {
	f := storekit.NewFaults()
	return f.Idempotency(s), f
}
