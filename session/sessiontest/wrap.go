package sessiontest

import (
	"github.com/tenurekit/tenure/internal/storekit"
	"github.com/tenurekit/tenure/session"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break: it is
// storetest.NewFaults().Sessions(s), returned with its faults.
func Wrap(s session.Store) (session.Store, Faults) {
	f := storekit.NewFaults()
	return f.Sessions(s), f
}
