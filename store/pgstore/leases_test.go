package pgstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// serverMicros reads the server's clock in microseconds since the epoch.
func serverMicros(t *testing.T, pool *pgxpool.Pool) uint64 {
	t.Helper()
	var ts time.Time
	if err := pool.QueryRow(ctxT(t), `SELECT clock_timestamp()`).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.UnixMicro())
}

// Fences are never below the database clock in microseconds, so a lost
// leases table (or one restored from an old backup) still yields fences
// above every earlier one; a counter ahead of the clock goes on by one.
func TestFenceAboveClockAfterDataLoss(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	s := db.Leases()
	before := serverMicros(t, pool)
	tok := lease.NewToken()
	g1, err := s.Acquire(ctx, "k", tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after := serverMicros(t, pool)
	if g1.Fence < before || g1.Fence > after {
		t.Fatalf("first fence %d not the server clock (between %d and %d µs)", g1.Fence, before, after)
	}
	if err := s.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE tenure.leases`); err != nil { // data loss
		t.Fatal(err)
	}
	if info, err := s.Inspect(ctx, "k"); err != nil || info.Fence != 0 {
		t.Fatalf("after truncate: %+v, %v", info, err)
	}
	g2, err := s.Acquire(ctx, "k", lease.NewToken(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after data loss not above %d", g2.Fence, g1.Fence)
	}
	// A counter ahead of the clock is followed by one more.
	const ahead = 1 << 60
	if _, err := pool.Exec(ctx, `UPDATE tenure.leases SET fence = $1, token = NULL, expires_at = NULL WHERE key = 'k'`, int64(ahead)); err != nil {
		t.Fatal(err)
	}
	g3, err := s.Acquire(ctx, "k", lease.NewToken(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Fence != ahead+1 {
		t.Fatalf("fence %d after a counter at %d, want %d", g3.Fence, uint64(ahead), uint64(ahead+1))
	}
}

// A token re-acquiring after its own lease expired starts a new tenure.
func TestSameTokenAfterExpiryGetsNewFence(t *testing.T) {
	_, db := fresh(t, nil)
	ctx := ctxT(t)
	s := db.Leases()
	tok := lease.NewToken()
	g1, err := s.Acquire(ctx, "k", tok, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitFree(t, s, "k")
	g2, err := s.Acquire(ctx, "k", tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after expiry not above %d", g2.Fence, g1.Fence)
	}
	// Within validity, the same token keeps the fence.
	g3, err := s.Acquire(ctx, "k", tok, time.Minute)
	if err != nil || g3.Fence != g2.Fence {
		t.Fatalf("re-acquire: %+v, %v; want fence %d", g3, err, g2.Fence)
	}
}

func TestTTLResolution(t *testing.T) {
	_, db := fresh(t, nil)
	ctx := ctxT(t)
	ttl := 10*time.Second + 1500*time.Nanosecond
	g, err := db.Leases().Acquire(ctx, "k", lease.NewToken(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 10*time.Second+2*time.Microsecond {
		t.Fatalf("granted %v for %v, want it rounded up to the microsecond", g.TTL, ttl)
	}
	info, err := db.Leases().Inspect(ctx, "k")
	if err != nil || !info.Held || info.TTL > g.TTL || info.TTL < g.TTL-5*time.Second {
		t.Fatalf("Inspect: %+v, %v; want held with TTL at most %v", info, err, g.TTL)
	}
}

// Tokens PostgreSQL text cannot hold are refused before any write.
func TestTokenTextRules(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	for _, tok := range []string{"bad\xffutf8", "nul\x00byte"} {
		if _, err := db.Leases().Acquire(ctx, "k", tok, time.Second); !errors.Is(err, lease.ErrInvalid) || strings.Contains(err.Error(), tok) {
			t.Errorf("Acquire with token %q: %v, want lease.ErrInvalid without the token", tok, err)
		}
		if _, err := db.Leases().Renew(ctx, "k", tok, time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Renew with token %q: %v, want lease.ErrInvalid", tok, err)
		}
		if err := db.Leases().Release(ctx, "k", tok); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Release with token %q: %v, want lease.ErrInvalid", tok, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.leases`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("leases rows = %d (%v), want 0", n, err)
	}
}

// A server that cannot be reached is ErrUnavailable, for every call.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/x?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := newPG(t, pool, nil)
	ctx := ctxT(t)
	s := db.Leases()
	tok := lease.NewToken()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("%s: %v, want lease.ErrUnavailable", what, err)
		}
	}
	_, err = s.Acquire(ctx, "k", tok, time.Second)
	check("Acquire", err)
	_, err = s.Renew(ctx, "k", tok, time.Second)
	check("Renew", err)
	check("Release", s.Release(ctx, "k", tok))
	_, err = s.Inspect(ctx, "k")
	check("Inspect", err)
	check("Migrate", db.Migrate(ctx))
}

// A request still waiting when its context ends is ErrUnavailable: here
// the acquire waits for a row lock held by CheckHolder's transaction.
func TestTimeoutInFlightIsUnavailable(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	a, err := leasetest.NewLocker(t, db.Leases(), nil).TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := db.PgxTx(tx).CheckHolder(ctx, a); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = db.Leases().Acquire(short, "k", lease.NewToken(), time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire blocked past its deadline: %v, want lease.ErrUnavailable", err)
	}
	// Same for the guard in a transaction of its own.
	err = pgx.BeginFunc(ctx, pool, func(tx2 pgx.Tx) error {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return db.PgxTx(tx2).CheckHolder(short, a)
	})
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("CheckHolder blocked past its deadline: %v, want lease.ErrUnavailable", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := db.Leases().Inspect(ctx, "k"); err != nil || !info.Held || info.Fence != a.Fence() {
		t.Fatalf("A's lease disturbed: %+v, %v", info, err)
	}
}
