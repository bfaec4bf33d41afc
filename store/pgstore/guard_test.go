package pgstore_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/pgstore"
)

// storedFence reads the fence admitted for resource (0 if none).
func storedFence(t *testing.T, pool *pgxpool.Pool, schema, resource string) uint64 {
	t.Helper()
	var f int64
	err := pool.QueryRow(ctxT(t), `SELECT fence FROM `+pgx.Identifier{schema, "fences"}.Sanitize()+` WHERE resource = $1`, resource).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return uint64(f)
}

// inTx runs fn in a transaction of its own, committed if fn succeeds.
func inTx(t *testing.T, pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error) error {
	t.Helper()
	ctx := ctxT(t)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

func wantStale(t *testing.T, err error, resource string, f, current uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v, want *fence.StaleError", err)
	}
	if stale.Resource != resource || stale.Fence != f || stale.Current != current {
		t.Fatalf("StaleError = %+v, want resource %q, fence %d, current %d", stale, resource, f, current)
	}
}

func wantNotHeld(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v, want lease.ErrNotHeld (and fence.ErrStale)", err)
	}
}

// waitFree polls the store's own judgement until key is free.
func waitFree(t *testing.T, s lease.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := s.Inspect(ctxT(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held: %+v", key, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAdmitStrict(t *testing.T) {
	pool, db := fresh(t, nil)
	admit := func(resource string, f uint64) error {
		return inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, resource, f) })
	}
	if err := admit("r", 10); err != nil {
		t.Fatalf("first fence: %v", err)
	}
	wantStale(t, admit("r", 10), "r", 10, 10) // strict: equal is stale
	wantStale(t, admit("r", 9), "r", 9, 10)
	if got := storedFence(t, pool, "tenure", "r"); got != 10 {
		t.Fatalf("stored fence %d after refusals, want 10", got)
	}
	if err := admit("r", 11); err != nil {
		t.Fatalf("newer fence: %v", err)
	}
	if err := admit("other", 5); err != nil {
		t.Fatalf("another resource is independent: %v", err)
	}
	if got := storedFence(t, pool, "tenure", "r"); got != 11 {
		t.Fatalf("stored fence %d, want 11", got)
	}
	if got := storedFence(t, pool, "tenure", "other"); got != 5 {
		t.Fatalf("other: stored fence %d, want 5", got)
	}
}

func TestAdmitAtLeast(t *testing.T) {
	pool, db := fresh(t, nil)
	admit := func(f uint64) error {
		return inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error { return db.PgxTx(tx).AdmitAtLeast(ctx, "r", f) })
	}
	for i := 0; i < 2; i++ {
		if err := admit(10); err != nil {
			t.Fatalf("write %d with fence 10: %v", i, err)
		}
	}
	wantStale(t, admit(9), "r", 9, 10)
	if err := admit(12); err != nil {
		t.Fatal(err)
	}
	if got := storedFence(t, pool, "tenure", "r"); got != 12 {
		t.Fatalf("stored fence %d, want 12", got)
	}
	// Both modes guard the same record.
	err := inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error { return db.PgxTx(tx).Admit(ctx, "r", 12) })
	wantStale(t, err, "r", 12, 12)
}

func TestAdmitInvalid(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, c := range []struct {
		name     string
		resource string
		f        uint64
		tx       pgx.Tx
	}{
		{"empty resource", "", 1, tx},
		{"resource with NUL", "a\x00b", 1, tx},
		{"resource not UTF-8", "\xff", 1, tx},
		{"fence 0", "r", 0, tx},
		{"fence above bigint", "r", math.MaxInt64 + 1, tx},
		{"nil tx", "r", 1, nil},
	} {
		if err := db.PgxTx(c.tx).Admit(ctx, c.resource, c.f); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Admit %s: %v, want lease.ErrInvalid", c.name, err)
		}
		if err := db.PgxTx(c.tx).AdmitAtLeast(ctx, c.resource, c.f); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("AdmitAtLeast %s: %v, want lease.ErrInvalid", c.name, err)
		}
	}
	if err := db.PgxTx(tx).CheckHolder(ctx, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("CheckHolder(nil): %v, want lease.ErrInvalid", err)
	}
	// The transaction is still usable and nothing was admitted.
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.fences`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("fences rows = %d (%v), want 0", n, err)
	}
}

// accounts creates a business table with one row (id 1, owner "init").
func accounts(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctxT(t), `CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL);
INSERT INTO accounts VALUES (1, 'init')`)
	if err != nil {
		t.Fatal(err)
	}
}

func owner(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var o string
	if err := pool.QueryRow(ctxT(t), `SELECT owner FROM accounts WHERE id = 1`).Scan(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// guardedUpdate updates the business row and admits f in one transaction;
// the UPDATE runs first so that a refused fence must roll it back.
func guardedUpdate(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store, f uint64, who string) error {
	return inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET owner = $1 WHERE id = 1`, who); err != nil {
			return err
		}
		return db.PgxTx(tx).Admit(ctx, "account:1", f)
	})
}

func TestStaleAdmitRollsBackBusinessWrite(t *testing.T) {
	pool, db := fresh(t, nil)
	accounts(t, pool)
	if err := guardedUpdate(t, pool, db, 20, "B"); err != nil {
		t.Fatalf("B: %v", err)
	}
	err := guardedUpdate(t, pool, db, 10, "A-late")
	wantStale(t, err, "account:1", 10, 20)
	if o := owner(t, pool); o != "B" {
		t.Fatalf("owner = %q after A's stale write, want B (the UPDATE must roll back)", o)
	}
	if f := storedFence(t, pool, "tenure", "account:1"); f != 20 {
		t.Fatalf("stored fence %d, want 20", f)
	}
	// Positive control: a newer fence commits the same kind of write.
	if err := guardedUpdate(t, pool, db, 30, "C"); err != nil {
		t.Fatal(err)
	}
	if o := owner(t, pool); o != "C" {
		t.Fatalf("owner = %q, want C", o)
	}
}

// fenceLiar reports a fence one above the granted one, so its Locker hands
// out leases with the right token and a wrong fence.
type fenceLiar struct{ lease.Store }

func (s fenceLiar) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	g, err := s.Store.Acquire(ctx, key, token, ttl)
	g.Fence++
	return g, err
}

// tokenSwapper acquires with another token than the Locker's, so its
// leases have the right fence and a wrong token.
type tokenSwapper struct{ lease.Store }

func (s tokenSwapper) Acquire(ctx context.Context, key, _ string, ttl time.Duration) (lease.Grant, error) {
	return s.Store.Acquire(ctx, key, "swapped-"+lease.NewToken(), ttl)
}

func TestCheckHolder(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	lk := leasetest.NewLocker(t, db.Leases(), nil)
	check := func(l *lease.Lease) error {
		return inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error { return db.PgxTx(tx).CheckHolder(ctx, l) })
	}
	held := func(key string, f uint64) {
		t.Helper()
		info, err := db.Leases().Inspect(ctx, key)
		if err != nil || !info.Held || info.Fence != f {
			t.Fatalf("Inspect(%q) = %+v, %v; want held with fence %d", key, info, err, f)
		}
	}

	t.Run("holder", func(t *testing.T) {
		l, err := lk.TryAcquire(ctx, "holder", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(l); err != nil {
			t.Fatalf("current holder: %v", err)
		}
	})
	t.Run("released", func(t *testing.T) {
		l, err := lk.TryAcquire(ctx, "released", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(l); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantNotHeld(t, check(l))
	})
	t.Run("expired", func(t *testing.T) {
		l, err := lk.TryAcquire(ctx, "expired", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		waitFree(t, db.Leases(), "expired")
		// Only the expiry differs: the row still has l's token and fence.
		wantNotHeld(t, check(l))
	})
	t.Run("wrong fence", func(t *testing.T) {
		l, err := leasetest.NewLocker(t, fenceLiar{db.Leases()}, nil).TryAcquire(ctx, "wrong-fence", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held("wrong-fence", l.Fence()-1) // held by l's token, with another fence
		wantNotHeld(t, check(l))
	})
	t.Run("wrong token", func(t *testing.T) {
		l, err := leasetest.NewLocker(t, tokenSwapper{db.Leases()}, nil).TryAcquire(ctx, "wrong-token", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held("wrong-token", l.Fence()) // l's fence, another token
		wantNotHeld(t, check(l))
	})
}

// The window a max-fence guard leaves open: A expired, B acquired but has not written yet. The
// max-fence guard still admits A; CheckHolder does not.
func TestMaxFenceIsTTLBlindCheckHolderIsNot(t *testing.T) {
	pool, db := fresh(t, nil)
	accounts(t, pool)
	ctx := ctxT(t)
	lk := leasetest.NewLocker(t, db.Leases(), nil)
	a, err := lk.TryAcquire(ctx, "k", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitFree(t, db.Leases(), "k")
	b, err := lk.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	// B has not written. A's fence is still the greatest the resource saw.
	err = inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		return db.PgxTx(tx).Admit(ctx, "blind", a.Fence())
	})
	if err != nil {
		t.Fatalf("Admit(A) should succeed (max-fence is TTL-blind): %v", err)
	}
	if f := storedFence(t, pool, "tenure", "blind"); f != a.Fence() {
		t.Fatalf("stored fence %d, want A's %d", f, a.Fence())
	}
	// The strict holder check refuses A, and A's business write rolls back.
	err = inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := db.PgxTx(tx).CheckHolder(ctx, a); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET owner = 'A-late' WHERE id = 1`)
		return err
	})
	wantNotHeld(t, err)
	if o := owner(t, pool); o != "init" {
		t.Fatalf("owner = %q, want init", o)
	}
	// B passes both guards.
	err = inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := db.PgxTx(tx).CheckHolder(ctx, b); err != nil {
			return err
		}
		if err := db.PgxTx(tx).Admit(ctx, "blind", b.Fence()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET owner = 'B' WHERE id = 1`)
		return err
	})
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if o := owner(t, pool); o != "B" {
		t.Fatalf("owner = %q, want B", o)
	}
	// Once B has written, the max-fence guard refuses A too.
	err = inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		return db.PgxTx(tx).Admit(ctx, "blind", a.Fence())
	})
	wantStale(t, err, "blind", a.Fence(), b.Fence())
}

// CheckHolder locks the lease row: an acquirer waits until the checking
// transaction ends, even when the checked lease expires meanwhile, so the
// holder's writes in that transaction land before the next tenure.
func TestCheckHolderBlocksAcquirer(t *testing.T) {
	pool, db := fresh(t, nil)
	accounts(t, pool)
	ctx := ctxT(t)
	a, err := leasetest.NewLocker(t, db.Leases(), nil).TryAcquire(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := db.PgxTx(tx).CheckHolder(ctx, a); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// A's lease expires on the database's clock while the row is locked
	// (Inspect does not lock, so it is not blocked).
	waitFree(t, db.Leases(), "k")

	type result struct {
		g   lease.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := db.Leases().Acquire(ctx, "k", lease.NewToken(), 30*time.Second)
		done <- result{g, err}
	}()
	// Wait until PostgreSQL reports the acquirer waiting for a lock.
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("acquire returned while the checking transaction was open: %+v, %v", r.g, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the acquirer never waited for the row lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("acquire returned while waiting for a lock: %+v, %v", r.g, r.err)
	default:
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET owner = 'A' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("acquire after the transaction ended: %v", r.err)
	}
	if r.g.Fence <= a.Fence() {
		t.Fatalf("new fence %d not above A's %d", r.g.Fence, a.Fence())
	}
	if o := owner(t, pool); o != "A" {
		t.Fatalf("owner = %q, want A (committed under the checked lease)", o)
	}
}
