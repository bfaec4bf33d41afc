package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
	"github.com/tenurekit/tenure/storetest"
)

const businessTable = "business"

// unit is the suite's short TTL: twice the default, so that a renewal
// every unit/3 keeps its lease alive while other test binaries load the
// machine and the race detector slows SQLite down.
const unit = 400 * time.Millisecond

// open opens a store on path and closes it when the test ends.
func open(t *testing.T, path string, o *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(t.Context(), path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tempPath(t *testing.T) string { return filepath.Join(t.TempDir(), "tenure.db") }

// createBusiness creates the caller's own table next to the store's.
func createBusiness(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS `+businessTable+
		` (name TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func readBusiness(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	err := db.QueryRowContext(t.Context(), `SELECT value FROM `+businessTable+` WHERE name = ?`, name).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return v
}

// newFakeClock returns a store clock the test moves by hand.
func newFakeClock() *storetest.Clock { return storetest.NewClock(time.Unix(1_800_000_000, 0)) }

// leaseRow is the stored row of a key.
type leaseRow struct {
	token   sql.NullString
	fence   int64
	expires sql.NullInt64
}

func readLease(t *testing.T, db *sql.DB, table, key string) (leaseRow, bool) {
	t.Helper()
	var r leaseRow
	err := db.QueryRowContext(t.Context(), `SELECT token, fence, expires_us FROM `+table+` WHERE "key" = ?`, key).
		Scan(&r.token, &r.fence, &r.expires)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// TestFenceRuleAndExpiryOnStoreClock checks the stored rows against the
// rule: a new tenure gets max(last + 1, now µs), the holding token keeps its
// fence and renews to the asked TTL, expiry is judged on Options.Clock,
// release clears token and expiry and keeps the fence.
func TestFenceRuleAndExpiryOnStoreClock(t *testing.T) {
	ctx := t.Context()
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})
	ls := s.Leases()
	t0 := clk.Now().UnixMicro()
	a, b := lease.NewToken(), lease.NewToken()

	// The grant's TTL is the one asked for plus the time the request
	// waited inside the store before it was applied (at most the call's).
	start := time.Now()
	g, err := ls.Acquire(ctx, "k", a, 10*time.Second)
	took := time.Since(start)
	if err != nil || g.Fence != uint64(t0) || g.TTL < 10*time.Second || g.TTL > 10*time.Second+took {
		t.Fatalf("first acquire: %+v, %v; want fence %d (now µs), TTL 10s plus at most the %v the call took", g, err, t0, took)
	}
	if r, _ := readLease(t, s.DB(), "tenure_leases", "k"); r.token.String != a || r.fence != t0 || r.expires.Int64 != t0+10e6 {
		t.Fatalf("stored %+v", r)
	}

	clk.Advance(3 * time.Second)
	_, err = ls.Acquire(ctx, "k", b, time.Second)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.TTL != 7*time.Second || held.Key != "k" {
		t.Fatalf("other token: %v, want HeldError with 7s left", err)
	}

	// The holding token again: same fence, expiry renewed to the new TTL.
	g, err = ls.Acquire(ctx, "k", a, 20*time.Second)
	if err != nil || g.Fence != uint64(t0) {
		t.Fatalf("re-acquire: %+v, %v", g, err)
	}
	if r, _ := readLease(t, s.DB(), "tenure_leases", "k"); r.expires.Int64 != t0+3e6+20e6 {
		t.Fatalf("re-acquire stored expiry %d, want %d", r.expires.Int64, t0+23e6)
	}
	start = time.Now()
	g, err = ls.Renew(ctx, "k", a, 5*time.Second)
	took = time.Since(start)
	if err != nil || g.Fence != uint64(t0) || g.TTL < 5*time.Second || g.TTL > 5*time.Second+took {
		t.Fatalf("renew: %+v, %v", g, err)
	}
	if info, _ := ls.Inspect(ctx, "k"); !info.Held || info.TTL != 5*time.Second || info.Fence != uint64(t0) {
		t.Fatalf("inspect %+v", info)
	}

	// Release keeps the fence and records when the lease ended (the
	// store's clock); the next tenure in the same microsecond gets last + 1.
	if err := ls.Release(ctx, "k", a); err != nil {
		t.Fatal(err)
	}
	r, _ := readLease(t, s.DB(), "tenure_leases", "k")
	if r.token.Valid || !r.expires.Valid || r.expires.Int64 != clk.Now().UnixMicro() || r.fence != t0 {
		t.Fatalf("after release stored %+v, want NULL token, the release time as expiry, fence %d", r, t0)
	}
	if info, _ := ls.Inspect(ctx, "k"); info.Held || info.Fence != uint64(t0) || info.TTL != 0 {
		t.Fatalf("inspect after release %+v", info)
	}
	clk.Set(time.UnixMicro(t0)) // the clock went back
	if g, err := ls.Acquire(ctx, "k", b, time.Second); err != nil || g.Fence != uint64(t0)+1 {
		t.Fatalf("acquire after release: %+v, %v, want fence %d", g, err, t0+1)
	}

	// Expiry is exact on the store clock: at now == expires_us it is free.
	clk.Advance(time.Second - time.Microsecond)
	if info, _ := ls.Inspect(ctx, "k"); !info.Held || info.TTL != time.Microsecond {
		t.Fatalf("one µs before expiry: %+v", info)
	}
	clk.Advance(time.Microsecond)
	if info, _ := ls.Inspect(ctx, "k"); info.Held {
		t.Fatalf("at expiry: %+v, want free", info)
	}
	if _, err := ls.Renew(ctx, "k", b, time.Second); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("renew at expiry: %v", err)
	}
	if err := ls.Release(ctx, "k", b); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("release at expiry: %v", err)
	}
	// The expired holder's own token starts a new tenure with a new fence.
	clk.Advance(time.Second)
	now := clk.Now().UnixMicro()
	if g, err := ls.Acquire(ctx, "k", b, time.Second); err != nil || g.Fence != uint64(now) {
		t.Fatalf("acquire after expiry: %+v, %v, want fence %d", g, err, now)
	}
	// A TTL that is not whole microseconds is rounded up, never down.
	if g, err := ls.Acquire(ctx, "k2", a, time.Millisecond+1); err != nil || g.TTL < time.Millisecond+time.Microsecond {
		t.Fatalf("sub-µs TTL: %+v, %v", g, err)
	}
	if r, _ := readLease(t, s.DB(), "tenure_leases", "k2"); r.expires.Int64 != now+1001 {
		t.Fatalf("sub-µs TTL stored expiry %d, want %d", r.expires.Int64, now+1001)
	}
}

// TestClosedStoreIsUnavailable: calls on a closed store fail with
// ErrUnavailable, never ErrHeld or ErrNotHeld.
func TestClosedStoreIsUnavailable(t *testing.T) {
	ctx := t.Context()
	s := open(t, tempPath(t), nil)
	createBusiness(t, s.DB())
	ls := s.Leases()
	tok := lease.NewToken()
	if _, err := ls.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{}
	_, checks["acquire"] = ls.Acquire(ctx, "k", tok, time.Minute)
	_, checks["renew"] = ls.Renew(ctx, "k", tok, time.Minute)
	checks["release"] = ls.Release(ctx, "k", tok)
	_, checks["inspect"] = ls.Inspect(ctx, "k")
	for op, err := range checks {
		if !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrNotHeld) {
			t.Errorf("%s on a closed store: %v, want ErrUnavailable", op, err)
		}
	}
	// A cancelled context is an unknown outcome too.
	s2 := open(t, tempPath(t), nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s2.Leases().Acquire(cctx, "k", tok, time.Minute); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("acquire with a cancelled context: %v, want ErrUnavailable", err)
	}
}

// TestTwoStoresOneLock: two *Store on one file, as two processes would
// open it, see one lock and one fence sequence.
func TestTwoStoresOneLock(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	p1, p2 := open(t, path, nil).Leases(), open(t, path, nil).Leases()
	a := lease.NewToken()
	ga, err := p1.Acquire(ctx, "job", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var held *lease.HeldError
	if _, err := p2.Acquire(ctx, "job", lease.NewToken(), time.Minute); !errors.As(err, &held) || held.TTL <= 0 || held.TTL > time.Minute {
		t.Fatalf("second process: %v, want HeldError with 0 < TTL <= 1m", err)
	}
	if info, err := p2.Inspect(ctx, "job"); err != nil || !info.Held || info.Fence != ga.Fence {
		t.Fatalf("second process sees %+v, %v; want held with fence %d", info, err, ga.Fence)
	}
	if err := p2.Release(ctx, "job", lease.NewToken()); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("second process releasing with another token: %v", err)
	}
	if err := p1.Release(ctx, "job", a); err != nil {
		t.Fatal(err)
	}
	gb, err := p2.Acquire(ctx, "job", lease.NewToken(), time.Minute)
	if err != nil || gb.Fence <= ga.Fence {
		t.Fatalf("second process after release: %+v, %v; want fence above %d", gb, err, ga.Fence)
	}
	if info, err := p1.Inspect(ctx, "job"); err != nil || !info.Held || info.Fence != gb.Fence {
		t.Fatalf("first process sees %+v, %v; want held with fence %d", info, err, gb.Fence)
	}
}

// TestConcurrentCycles: 20 goroutines run acquire/release cycles on a few
// keys of one file, through one store and through two (two processes).
// Nothing may fail except with ErrHeld (in particular no SQLITE_BUSY),
// holders never overlap, and every fence of a key is new.
func TestConcurrentCycles(t *testing.T) {
	for n, name := range map[int]string{1: "OneStore", 2: "TwoStores"} {
		t.Run(name, func(t *testing.T) {
			path := tempPath(t)
			var stores []lease.Store
			for range n {
				stores = append(stores, open(t, path, nil).Leases())
			}
			concurrentCycles(t, stores)
		})
	}
}

func concurrentCycles(t *testing.T, stores []lease.Store) {
	ctx := t.Context()
	const (
		workers = 20
		cycles  = 25
		keys    = 3
	)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  [keys]int
		fences  [keys]map[uint64]bool
		granted int
		failed  []error
	)
	for i := range fences {
		fences[i] = map[uint64]bool{}
	}
	fail := func(err error) {
		mu.Lock()
		failed = append(failed, err)
		mu.Unlock()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls := stores[w%len(stores)]
			for c := 0; c < cycles; c++ {
				k := (w + c) % keys
				key := "cycle/" + string(rune('a'+k))
				tok := lease.NewToken()
				g, err := ls.Acquire(ctx, key, tok, time.Minute)
				if errors.Is(err, lease.ErrHeld) {
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				inside[k]++
				overlap := inside[k] != 1
				dup := fences[k][g.Fence]
				fences[k][g.Fence] = true
				granted++
				mu.Unlock()
				if overlap || dup {
					fail(errors.New("two holders at once or a repeated fence on " + key))
				}
				if _, err := ls.Renew(ctx, key, tok, time.Minute); err != nil {
					fail(err)
				}
				mu.Lock()
				inside[k]--
				mu.Unlock()
				if err := ls.Release(ctx, key, tok); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range failed {
		t.Error(err)
	}
	if granted < keys {
		t.Fatalf("only %d grants", granted)
	}
	t.Logf("%d grants in %d attempts", granted, workers*cycles)
	for k := 0; k < keys; k++ {
		key := "cycle/" + string(rune('a'+k))
		info, err := stores[0].Inspect(ctx, key)
		if err != nil || info.Held {
			t.Fatalf("%s after all releases: %+v, %v", key, info, err)
		}
		var top uint64
		for f := range fences[k] {
			top = max(top, f)
		}
		if info.Fence != top {
			t.Fatalf("%s: stored fence %d, the last granted was %d", key, info.Fence, top)
		}
	}
}

// TestBadTablePrefix: a bad prefix is refused before anything is created.
func TestBadTablePrefix(t *testing.T) {
	ctx := t.Context()
	bad := []string{"1abc", "a-b", "a b", `x"; DROP TABLE y; --`, "sqlite_x", "SQLite_", "é",
		"p234567890123456789012345678901234567890123456789"}
	for _, p := range bad {
		path := tempPath(t)
		s, err := sqlitestore.Open(ctx, path, &sqlitestore.Options{TablePrefix: p})
		if err == nil {
			s.Close()
			t.Fatalf("Open with prefix %q succeeded", p)
		}
		if want := "invalid TablePrefix"; !strings.Contains(err.Error(), want) {
			t.Fatalf("prefix %q: error %q does not say %q", p, err, want)
		}
		if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*")); len(m) != 0 {
			t.Fatalf("prefix %q: Open created %v", p, m)
		}
	}
	// New on an existing database writes nothing either.
	db, err := sql.Open("sqlite", sqlitestore.DSN(tempPath(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.New(ctx, db, &sqlitestore.Options{TablePrefix: "bad-prefix"}); err == nil {
		t.Fatal("New with a bad prefix succeeded")
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("New with a bad prefix left %d schema objects (%v)", n, err)
	}
	if _, err := sqlitestore.New(ctx, nil, nil); err == nil {
		t.Fatal("New(nil db) succeeded")
	}
	if _, err := sqlitestore.Open(ctx, "", nil); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
	// A good prefix names the tables, and opening again is idempotent.
	path := tempPath(t)
	for i := 0; i < 2; i++ {
		s := open(t, path, &sqlitestore.Options{TablePrefix: "App_1_"})
		if _, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		var names []string
		rows, err := s.DB().QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			rows.Scan(&n)
			names = append(names, n)
		}
		rows.Close()
		want := []string{"App_1_fences", "App_1_idempotency", "App_1_lease_fence_floor", "App_1_lease_waiters", "App_1_leases", "App_1_migrations", "App_1_ratelimit",
			"App_1_schedule_attempts", "App_1_schedule_jobs", "App_1_schedule_ledger", "App_1_schedule_slots", "App_1_sessions"}
		if !slices.Equal(names, want) {
			t.Fatalf("tables %v, want %v", names, want)
		}
		s.Close()
	}
}

// TestPathWithURICharacters: a path containing characters that mean
// something in a file: URI opens that very file.
func TestPathWithURICharacters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "we?ird#name%41.db")
	s := open(t, path, nil)
	if _, err := s.Leases().Acquire(t.Context(), "k", lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	found := false
	for _, p := range m {
		found = found || p == path
	}
	if !found {
		t.Fatalf("files %v, want %s", m, path)
	}
	var mode string
	if err := s.DB().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q (%v), want wal", mode, err)
	}
}
