package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// admitTx runs admit in its own transaction and commits if it succeeds.
// admitFunc is a guard in a transaction: strict or atLeast.
type admitFunc = func(ctx context.Context, tx *sql.Tx, r string, f uint64) error

func strict(s *sqlitestore.Store) admitFunc {
	return func(ctx context.Context, tx *sql.Tx, r string, f uint64) error { return s.Tx(tx).Admit(ctx, r, f) }
}

func atLeast(s *sqlitestore.Store) admitFunc {
	return func(ctx context.Context, tx *sql.Tx, r string, f uint64) error {
		return s.Tx(tx).AdmitAtLeast(ctx, r, f)
	}
}

func admitTx(t *testing.T, s *sqlitestore.Store, admit admitFunc, r string, f uint64) error {
	t.Helper()
	ctx := t.Context()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := admit(ctx, tx, r, f); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// storedFence reads the fence admitted for resource (0 if none).
func storedFence(t *testing.T, s *sqlitestore.Store, resource string) uint64 {
	t.Helper()
	var f int64
	err := s.DB().QueryRowContext(t.Context(), `SELECT fence FROM tenure_fences WHERE resource = ?`, resource).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return uint64(f)
}

func wantStale(t *testing.T, err error, resource string, f, current uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fence %d: %v, want *fence.StaleError", f, err)
	}
	if stale.Resource != resource || stale.Fence != f || stale.Current != current {
		t.Fatalf("StaleError %+v, want resource %q, fence %d, current %d", stale, resource, f, current)
	}
}

func TestAdmitStrict(t *testing.T) {
	s := open(t, tempPath(t), nil)
	if err := admitTx(t, s, strict(s), "r", 10); err != nil {
		t.Fatalf("first fence: %v", err)
	}
	wantStale(t, admitTx(t, s, strict(s), "r", 10), "r", 10, 10)
	wantStale(t, admitTx(t, s, strict(s), "r", 9), "r", 9, 10)
	if got := storedFence(t, s, "r"); got != 10 {
		t.Fatalf("stored %d after stale admits, want 10", got)
	}
	if err := admitTx(t, s, strict(s), "r", 11); err != nil {
		t.Fatalf("newer fence: %v", err)
	}
	if got := storedFence(t, s, "r"); got != 11 {
		t.Fatalf("stored %d, want 11", got)
	}
	// Resources are independent.
	if err := admitTx(t, s, strict(s), "other", 1); err != nil {
		t.Fatal(err)
	}
	if got := storedFence(t, s, "r"); got != 11 {
		t.Fatalf("stored %d, want 11", got)
	}
	// The largest fence the store accepts.
	if err := admitTx(t, s, strict(s), "r", math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if got := storedFence(t, s, "r"); got != math.MaxInt64 {
		t.Fatalf("stored %d", got)
	}
}

func TestAdmitAtLeast(t *testing.T) {
	s := open(t, tempPath(t), nil)
	for i, f := range []uint64{10, 10, 12, 12} {
		if err := admitTx(t, s, atLeast(s), "r", f); err != nil {
			t.Fatalf("admit #%d (fence %d): %v", i, f, err)
		}
	}
	wantStale(t, admitTx(t, s, atLeast(s), "r", 11), "r", 11, 12)
	if got := storedFence(t, s, "r"); got != 12 {
		t.Fatalf("stored %d, want 12", got)
	}
	// Strict mode on the same resource still refuses the equal fence.
	wantStale(t, admitTx(t, s, strict(s), "r", 12), "r", 12, 12)
}

// TestStaleAdmitRollsBackBusinessWrite: the caller's own UPDATE in the
// same transaction as a stale Admit does not survive, whichever comes
// first.
func TestStaleAdmitRollsBackBusinessWrite(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	createBusiness(t, s.DB())
	lk := leasetest.NewLocker(t, s.Leases(), nil)
	a, err := lk.TryAcquire(ctx, "ledger-lock", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := lk.TryAcquire(ctx, "ledger-lock", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := (resource{s}).FencedWrite(ctx, "ledger", b.Fence(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	for _, updateFirst := range []bool{true, false} {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		update := func() {
			if _, err := tx.ExecContext(ctx, `UPDATE `+businessTable+` SET value = 'A-late' WHERE name = 'ledger'`); err != nil {
				t.Fatal(err)
			}
		}
		if updateFirst {
			update()
		}
		err = s.Tx(tx).Admit(ctx, "ledger", a.Fence())
		wantStale(t, err, "ledger", a.Fence(), b.Fence())
		if !updateFirst {
			update() // a careless caller that goes on anyway
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if v := readBusiness(t, s.DB(), "ledger"); v != "B" {
			t.Fatalf("business row %q after the stale transaction, want B", v)
		}
		if got := storedFence(t, s, "ledger"); got != b.Fence() {
			t.Fatalf("admitted fence %d, want B's %d", got, b.Fence())
		}
	}
}

// acquireAt acquires key through a Locker whose own validity lasts a
// minute of real time; only the store's (fake) clock decides expiry.
func acquireAt(t *testing.T, s *sqlitestore.Store, key string) *lease.Lease {
	t.Helper()
	l, err := leasetest.NewLocker(t, s.Leases(), nil).TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkTx runs CheckHolder in a transaction and rolls back.
func checkTx(t *testing.T, s *sqlitestore.Store, l *lease.Lease) error {
	t.Helper()
	tx, err := s.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return s.Tx(tx).CheckHolder(t.Context(), l)
}

func TestCheckHolder(t *testing.T) {
	ctx := t.Context()
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})

	// The holder passes.
	a := acquireAt(t, s, "k")
	if err := checkTx(t, s, a); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// One microsecond before expiry it still holds; at expiry it does not.
	clk.Advance(time.Minute - time.Microsecond)
	if err := checkTx(t, s, a); err != nil {
		t.Fatalf("holder just before expiry: %v", err)
	}
	clk.Advance(time.Microsecond)
	if err := checkTx(t, s, a); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("expired holder: %v, want ErrNotHeld", err)
	}
	// Other fence: the same token re-acquires after expiry and gets a new
	// fence; the old lease (old fence) is refused although token and
	// expiry match.
	g, err := s.Leases().Acquire(ctx, "k", a.Token().Reveal(), time.Minute)
	if err != nil || g.Fence == a.Fence() {
		t.Fatalf("re-acquire after expiry: %+v, %v", g, err)
	}
	if err := checkTx(t, s, a); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("lease with an old fence: %v, want ErrNotHeld", err)
	}
	if err := s.Leases().Release(ctx, "k", a.Token().Reveal()); err != nil {
		t.Fatal(err)
	}
	// Released.
	b := acquireAt(t, s, "k")
	if err := checkTx(t, s, b); err != nil {
		t.Fatalf("new holder: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checkTx(t, s, b); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("released holder: %v, want ErrNotHeld", err)
	}
	// Another holder's lease on the key.
	c := acquireAt(t, s, "k")
	if err := checkTx(t, s, b); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("previous holder while C holds: %v, want ErrNotHeld", err)
	}
	if err := checkTx(t, s, c); err != nil {
		t.Fatalf("C: %v", err)
	}
	// The error names neither token.
	err = checkTx(t, s, b)
	if strings.Contains(err.Error(), b.Token().Reveal()) || strings.Contains(err.Error(), c.Token().Reveal()) {
		t.Fatalf("error %q contains a token", err)
	}
	if err := s.Tx(nil).CheckHolder(ctx, c); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("nil tx: %v", err)
	}
	tx, _ := s.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	if err := s.Tx(tx).CheckHolder(ctx, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("nil lease: %v", err)
	}
}

// TestMaxFenceGuardIsTTLBlindButCheckHolderIsNot is the window a max-fence
// guard leaves open: A's
// lease expired, B acquired but has not written yet. The max-fence guard
// still admits A; CheckHolder does not. With CheckHolder in front, A's
// business write is rolled back and B's goes through.
func TestMaxFenceGuardIsTTLBlindButCheckHolderIsNot(t *testing.T) {
	ctx := t.Context()
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})
	createBusiness(t, s.DB())
	a := acquireAt(t, s, "k")
	if err := admitTx(t, s, strict(s), "blind", a.Fence()-1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // A's lease expires on the store's clock
	b := acquireAt(t, s, "k")
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}

	if err := admitTx(t, s, strict(s), "blind", a.Fence()); err != nil {
		t.Fatalf("the max-fence guard should still admit A: %v", err)
	}
	holderWrite := func(l *lease.Lease, v string) error {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := s.Tx(tx).CheckHolder(ctx, l); err != nil {
			return err
		}
		if err := s.Tx(tx).AdmitAtLeast(ctx, "guarded", l.Fence()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+businessTable+` (name, value) VALUES ('guarded', ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, v); err != nil {
			t.Fatal(err)
		}
		return tx.Commit()
	}
	if err := holderWrite(a, "A-late"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("expired A through CheckHolder: %v, want ErrNotHeld", err)
	}
	if v := readBusiness(t, s.DB(), "guarded"); v != "" {
		t.Fatalf("A's refused write left %q", v)
	}
	if err := holderWrite(b, "B"); err != nil {
		t.Fatalf("B: %v", err)
	}
	if v := readBusiness(t, s.DB(), "guarded"); v != "B" {
		t.Fatalf("business row %q, want B", v)
	}
}

// TestCheckHolderTakesWriteLock: on a database opened without
// _txlock=immediate, CheckHolder still locks out writers until the
// transaction ends, like SELECT ... FOR UPDATE.
func TestCheckHolderTakesWriteLock(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlitestore.New(ctx, db, &sqlitestore.Options{Migrate: sqlitestore.MigrateApply})
	if err != nil {
		t.Fatal(err)
	}
	// A second "process" that does not wait for locks.
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	canWrite := func() bool {
		tx, err := other.BeginTx(ctx, nil)
		if err != nil {
			if !strings.Contains(err.Error(), "SQLITE_BUSY") {
				t.Fatalf("unexpected error: %v", err)
			}
			return false
		}
		tx.Rollback()
		return true
	}
	l := acquireAt(t, s, "k")
	tx, err := db.BeginTx(ctx, nil) // deferred: no lock yet
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if !canWrite() {
		t.Fatal("a deferred BEGIN already locks out writers; the test proves nothing")
	}
	if err := s.Tx(tx).CheckHolder(ctx, l); err != nil {
		t.Fatal(err)
	}
	if canWrite() {
		t.Fatal("another writer could start after CheckHolder: the lease row is not locked")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if !canWrite() {
		t.Fatal("still locked after the transaction ended")
	}
}

// TestLeaseOpsReadClockAfterLock: a renewal that waits for the write lock
// is judged on the clock when it gets the lock. If the lease expired while
// it waited, it is not brought back.
func TestLeaseOpsReadClockAfterLock(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		name := map[bool]string{false: "Open", true: "NewDeferred"}[deferred]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			path := tempPath(t)
			clk := newFakeClock()
			o := &sqlitestore.Options{Clock: clk.Now, Migrate: sqlitestore.MigrateApply}
			var s *sqlitestore.Store
			if deferred {
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if s, err = sqlitestore.New(ctx, db, o); err != nil {
					t.Fatal(err)
				}
			} else {
				s = open(t, path, o)
			}
			tok := lease.NewToken()
			if _, err := s.Leases().Acquire(ctx, "k", tok, time.Second); err != nil {
				t.Fatal(err)
			}
			// Another process holds the write lock.
			other := open(t, path, nil)
			otx, err := other.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer otx.Rollback()
			res := make(chan error, 1)
			go func() {
				_, err := s.Leases().Renew(ctx, "k", tok, time.Minute)
				res <- err
			}()
			// Let the renewal reach the lock (if it read the clock before
			// waiting, it read the old time).
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-res:
				t.Fatalf("renew did not wait for the write lock: %v", err)
			default:
			}
			clk.Advance(2 * time.Second) // the lease expires while the renewal waits
			if err := otx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := <-res; !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("renew that waited past the expiry: %v, want ErrNotHeld", err)
			}
			if info, err := s.Leases().Inspect(ctx, "k"); err != nil || info.Held {
				t.Fatalf("the expired lease was brought back: %+v, %v", info, err)
			}
		})
	}
}

// TestBadInputWritesNothing: bad resources and fences are refused with
// ErrInvalid before anything is written.
func TestBadInputWritesNothing(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	long := strings.Repeat("r", lease.MaxKeyLen+1)
	cases := []struct {
		name     string
		resource string
		fence    uint64
	}{
		{"empty resource", "", 1},
		{"long resource", long, 1},
		{"bad utf8", "\xff\xfe", 1},
		{"NUL", "a\x00b", 1},
		{"zero fence", "r", 0},
		{"fence above int64", "r", math.MaxInt64 + 1},
		{"max uint64", "r", math.MaxUint64},
	}
	for _, c := range cases {
		for mode, admit := range map[string]func(context.Context, *sql.Tx, string, uint64) error{
			"strict": strict(s), "at-least": atLeast(s),
		} {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = admit(ctx, tx, c.resource, c.fence)
			if !errors.Is(err, lease.ErrInvalid) || errors.Is(err, fence.ErrStale) {
				t.Errorf("%s %s: %v, want lease.ErrInvalid", mode, c.name, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Tx(nil).Admit(ctx, "r", 1); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("nil tx: %v", err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM tenure_fences`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad input wrote %d fence rows (%v)", n, err)
	}
	// A transaction that already ended is the caller's mistake, not the
	// store being down.
	tx, _ := s.DB().BeginTx(ctx, nil)
	tx.Rollback()
	if err := s.Tx(tx).Admit(ctx, "r", 1); !errors.Is(err, sql.ErrTxDone) || errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("ended tx: %v, want sql.ErrTxDone", err)
	}
}
