package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/store/memstore"
)

// memFenced is the server's FencedKV on a memory store (tenure serve
// builds it from the store it opened).
type memFenced struct{ *memstore.Store }

func (m memFenced) FencedWrite(ctx context.Context, name string, f uint64, v []byte) error {
	return m.FencedSet(ctx, name, f, v)
}
func (m memFenced) HolderWrite(ctx context.Context, l *lease.Lease, name string, v []byte) error {
	return m.HolderSet(ctx, l, name, v)
}
func (m memFenced) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	return m.FencedGet(ctx, name)
}

// Read-modify-write under a lease through tenure serve: read the value,
// compute, and write with HolderWrite, which the server applies only while
// the lease still holds its key. A holder that paused past its lease
// between the read and the write is refused, even before the next holder
// has written, so no increment is lost.
func ExampleClient_HolderWrite() {
	ctx := context.Background()
	m, _ := memstore.New(nil)
	srv, _ := server.New(server.Stores{Leases: m.Leases(), Fenced: memFenced{m}}, &server.Options{
		Config: server.AdminConfig(tenure.TokenOf("app-token-0123456789")),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()

	c, _ := client.New(hs.URL, &client.Options{Token: "app-token-0123456789"})
	locker, _ := lease.New(c.Leases(), nil)
	increment := func(l *lease.Lease) error {
		b, _, err := c.FencedRead(ctx, "jobs/runs")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(b))
		return c.HolderWrite(ctx, l, "jobs/runs", []byte(strconv.Itoa(n+1)))
	}

	first, _ := locker.TryAcquire(ctx, "jobs/runs-lock", 50*time.Millisecond)
	fmt.Println("first holder:", increment(first))
	for info, _ := c.Leases().Inspect(ctx, "jobs/runs-lock"); info.Held; info, _ = c.Leases().Inspect(ctx, "jobs/runs-lock") {
		time.Sleep(10 * time.Millisecond) // the first holder pauses past its lease
	}
	second, _ := locker.TryAcquire(ctx, "jobs/runs-lock", time.Minute)
	err := increment(first) // late: refused although the second has not written
	fmt.Println("first holder, late:", errors.Is(err, lease.ErrNotHeld))
	fmt.Println("second holder:", increment(second))
	v, _, _ := c.FencedRead(ctx, "jobs/runs")
	fmt.Println("runs:", string(v))
	// Output:
	// first holder: <nil>
	// first holder, late: true
	// second holder: <nil>
	// runs: 2
}
