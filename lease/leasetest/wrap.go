package leasetest

import (
	"github.com/tenurekit/tenure/internal/storekit"
	"github.com/tenurekit/tenure/lease"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break: it is
// storetest.NewFaults().Leases(s), returned with its faults.
func Wrap(s lease.Store) (lease.Store, Faults) {
	f := storekit.NewFaults()
	return f.Leases(s), f
}
