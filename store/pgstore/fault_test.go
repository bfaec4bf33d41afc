package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// TestServerPausedPastTTL freezes PostgreSQL (SIGSTOP) while A holds a
// lease and has a guarded write in flight, keeps it frozen past A's TTL,
// and resumes it. Expiry is judged on the database clock when each
// statement runs, so A's late CheckHolder fails, its write does not land,
// and the next holder gets a greater fence. It needs a private server: a
// shared one must not be paused.
func TestServerPausedPastTTL(t *testing.T) {
	srv := testenv.Postgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	db := newPG(t, pool, nil)
	ctx := ctxT(t)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r := newResource(t, pool, db)
	s := db.Leases()
	const ttl = 300 * time.Millisecond
	a, err := leasetest.NewLocker(t, s, nil).TryAcquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now() // the store applied A's acquire before this
	if err := r.FencedWrite(ctx, "item", a.Fence(), "A"); err != nil {
		t.Fatalf("A's write while holding: %v", err)
	}

	srv.Pause(t)
	paused := true
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()
	// A's next guarded write and B's acquire are sent to the frozen server.
	aWrite := make(chan error, 1)
	go func() {
		aWrite <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := db.PgxTx(tx).CheckHolder(ctx, a); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, upsertItem, "item", "A-late")
			return err
		})
	}()
	type result struct {
		g   lease.Grant
		err error
	}
	bTok := lease.NewToken()
	bAcq := make(chan result, 1)
	go func() {
		g, err := s.Acquire(ctx, "k", bTok, time.Minute)
		bAcq <- result{g, err}
	}()
	// A's client-side validity runs out first, then its TTL on the
	// server's clock (which runs on while the process is stopped).
	<-a.Done()
	time.Sleep(time.Until(granted.Add(ttl + 50*time.Millisecond)))
	select {
	case err := <-aWrite:
		t.Fatalf("A's write returned while the server was frozen: %v", err)
	case b := <-bAcq:
		t.Fatalf("B's acquire returned while the server was frozen: %+v, %v", b.g, b.err)
	default:
	}
	srv.Resume(t)
	paused = false

	if err := <-aWrite; !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("A's late CheckHolder: %v, want lease.ErrNotHeld", err)
	}
	b := <-bAcq
	if b.err != nil {
		t.Fatalf("B's acquire: %v", b.err)
	}
	if b.g.Fence <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.g.Fence, a.Fence())
	}
	if v, err := r.Read(ctx, "item"); err != nil || v != "A" {
		t.Fatalf("item = %q (%v), want A's write from before the pause only", v, err)
	}
	if _, err := s.Renew(ctx, "k", a.Token().Reveal(), time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("A's renew after the pause: %v, want lease.ErrNotHeld", err)
	}
	if info, err := s.Inspect(ctx, "k"); err != nil || !info.Held || info.Fence != b.g.Fence {
		t.Fatalf("Inspect: %+v, %v; want held by B with fence %d", info, err, b.g.Fence)
	}
	// B's guarded write lands, and A's fence is stale from now on.
	if err := r.FencedWrite(ctx, "item", b.g.Fence, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := r.FencedWrite(ctx, "item", a.Fence(), "A-later"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's write after B's: %v, want fence.ErrStale", err)
	}
	if err := s.Release(ctx, "k", bTok); err != nil {
		t.Fatal(err)
	}
	next, err := s.Acquire(context.Background(), "k", lease.NewToken(), time.Minute)
	if err != nil || next.Fence <= b.g.Fence {
		t.Fatalf("next acquire: %+v, %v; want a fence above %d", next, err, b.g.Fence)
	}
}
