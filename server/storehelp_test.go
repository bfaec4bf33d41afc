package server_test

import (
	"testing"

	"github.com/tenurekit/tenure/internal/fencedkv"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/store/memstore"
)

// memStores returns a memory store and every view of it the server
// serves, its fenced values and the values checked against its sessions
// (fencedkv.MemSessionKV, as tenure serve wires it) included.
func memStores(t testing.TB) (*memstore.Store, server.Stores) {
	t.Helper()
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, server.Stores{Leases: m.Leases(), Idempotency: m.Idempotency(), Limits: m.Limits(),
		Sessions: m.Sessions(), Schedules: m.Schedules(), Fenced: fencedMem{m},
		SessionValues: fencedkv.NewMemSessionKV(m)}
}
