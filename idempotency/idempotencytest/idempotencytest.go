// Package idempotencytest is the conformance suite every idempotency.Store
// must pass, run by each store's tests:
//
//	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target { ... })
//
// The suite asserts what the store really holds (through Inspect on an
// independent view) as well as what each call returns, and counts how often
// fn ran. Stores that are a business database (PostgreSQL, SQLite) also
// provide a TxTarget, and the transactional cases run on it. A bug fixed in
// one store gets a case here.
package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/secret"
)

// Faults breaks and heals the path between a Store and its server.
type Faults interface {
	// Cut makes the server unreachable.
	Cut()
	// DropReplies lets requests reach the server and apply, but loses
	// every reply.
	DropReplies()
	// Heal restores normal service.
	Heal()
}

// Business is the caller's own table, written inside a transaction.
type Business interface {
	// Add inserts one row named name.
	Add(ctx context.Context, name string) error
}

// TxTarget is the transactional form of a SQL store.
type TxTarget struct {
	// Run begins a transaction (READ COMMITTED where the database has
	// levels), calls body with the store's idempotency.Tx and the business
	// table bound to it, and commits if body returns nil, else rolls back.
	// It returns body's error, or the commit's. Each call may run on its
	// own connection, concurrently with others.
	Run func(ctx context.Context, body func(tx idempotency.Tx, biz Business) error) error
	// Count returns the number of committed business rows named name.
	Count func(ctx context.Context, name string) (int, error)
}

// Target is one store under test.
type Target struct {
	// Store is the store under test; Faults act on it.
	Store idempotency.Store
	// Direct is an independent view of the same data that Faults do not
	// touch. Default Store.
	Direct idempotency.Store
	// NewClient returns a store on the same data through a client of its
	// own (its own connection or pool, as a separate process would have),
	// for the concurrency cases. Default: Direct for every client.
	NewClient func(t *testing.T) idempotency.Store
	// Faults breaks the path between Store and its server. Required.
	Faults Faults
	// Tx is the transactional form, for SQL stores; nil leaves those cases out.
	Tx *TxTarget
	// Unit is a short claim TTL and retention the store honours. Default
	// 300ms.
	Unit time.Duration
	// Retained, if set, reaches what the store keeps of its records, for
	// the case that checks a record is kept for its retention and no
	// longer (RecordsGoAfterRetention; skipped when nil).
	Retained *Retained
}

// Run runs the conformance suite. newTarget is called once per subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		tx   bool
		fn   func(t *testing.T, tg Target)
	}{
		{"SequentialReplay", false, testSequentialReplay},
		{"ChangedInputRejected", false, testChangedInput},
		{"ScopesAreSeparate", false, testScopes},
		{"ConcurrentDuplicatesRunOnce", false, testConcurrentNoWait},
		{"ConcurrentDuplicatesWaitAndReplay", false, testConcurrentWait},
		{"InProgressThenWait", false, testInProgress},
		{"ErrorReleasesClaim", false, testErrorReleases},
		{"FinalErrorReplayed", false, testFinalError},
		{"StoreErrorsPolicy", false, testStoreErrors},
		{"PanicReleasesClaim", false, testPanic},
		{"RetentionExpiry", false, testRetention},
		{"KeepAliveHoldsClaim", false, testKeepAlive},
		{"UnreachableMeansErrorAndNoRun", false, testUnreachable},
		{"LostBeginReplyCleanedUp", false, testLostBegin},
		{"LostCompleteReplyReconciled", false, testLostComplete},
		{"InvalidInputWritesNothing", false, testInvalid},
		{"AbandonedClaimIsUnknown", false, testAbandoned},
		{"StalledExecutorRefused", false, testStalled},
		{"StaleClaimRefusedDuringTakeover", false, testStaleClaimDuringTakeover},
		{"RecordsGoAfterRetention", false, testRecordsGoAfterRetention},
		{"TxCommitsWithBusinessRows", true, testTxCommit},
		{"TxFailedTransactionLeavesNoRecord", true, testTxFailed},
		{"TxErrorUndoesAndReleases", true, testTxError},
		{"TxPanicUndoesAndReleases", true, testTxPanic},
		{"TxFinalErrorRecordedWithoutWrites", true, testTxFinal},
		{"TxConcurrentDuplicatesWaitAndReplay", true, testTxConcurrent},
		{"TxDuplicateRunsAfterRollback", true, testTxAfterRollback},
	}
	// The transactional cases apply only to stores with a transactional
	// form; Run leaves them out elsewhere (and logs it).
	hasTx := newTarget(t).Tx != nil
	if !hasTx {
		t.Logf("idempotencytest: the store has no transactional form; the Tx cases do not apply")
	}
	// The Admin cases apply to stores whose view implements
	// idempotency.Admin.
	if tg := newTarget(t); tg.Direct != nil || tg.Store != nil {
		s := tg.Direct
		if s == nil {
			s = tg.Store
		}
		if _, ok := s.(idempotency.Admin); ok {
			for _, ac := range adminCases {
				tests = append(tests, struct {
					name string
					tx   bool
					fn   func(t *testing.T, tg Target)
				}{ac.name, false, func(t *testing.T, tg Target) { ac.fn(t, tg, tg.Direct.(idempotency.Admin)) }})
			}
		} else {
			t.Logf("idempotencytest: the store's view does not implement idempotency.Admin; the Admin cases do not apply")
		}
	}
	for _, tc := range tests {
		if tc.tx && !hasTx {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Store == nil || tg.Faults == nil {
				t.Fatal("idempotencytest: Target needs Store and Faults")
			}
			if tc.tx && tg.Tx == nil {
				t.Fatal("idempotencytest: the Target's Tx is set for some cases and not others")
			}
			if tg.Direct == nil {
				tg.Direct = tg.Store
			}
			if tg.NewClient == nil {
				direct := tg.Direct
				tg.NewClient = func(*testing.T) idempotency.Store { return direct }
			}
			if tg.Unit <= 0 {
				tg.Unit = 300 * time.Millisecond
			}
			t.Cleanup(tg.Faults.Heal)
			tc.fn(t, tg)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// request returns a request unique to the running test.
func request(t *testing.T, suffix string) idempotency.Request {
	return idempotency.Request{
		Scope:       fmt.Sprintf("idemtest/%s/%d", t.Name(), time.Now().UnixNano()),
		Key:         "key-" + suffix,
		Fingerprint: idempotency.Fingerprint([]byte("input " + suffix)),
	}
}

// counter is an fn that counts its runs and returns value.
type counter struct {
	n     atomic.Int32
	value string
}

func (c *counter) fn(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
	c.n.Add(1)
	return []byte(c.value), nil
}

func (c *counter) runs() int { return int(c.n.Load()) }

func inspect(t *testing.T, s idempotency.Store, id idempotency.ID) idempotency.Record {
	t.Helper()
	r, err := s.Inspect(ctxT(t), id)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if r.ID != id {
		t.Fatalf("Inspect returned ID %+v, want %+v", r.ID, id)
	}
	return r
}

// wantCompleted checks that the store holds a completed record with value.
func wantCompleted(t *testing.T, s idempotency.Store, req idempotency.Request, value string) idempotency.Record {
	t.Helper()
	r := inspect(t, s, req.ID())
	if !r.Exists || !r.Completed {
		t.Fatalf("record %+v: want a completed record", r)
	}
	if r.Fingerprint != req.Fingerprint || r.Fence == 0 || r.ClaimTTL != 0 || r.Expires <= 0 {
		t.Fatalf("record %+v: want fingerprint %q, a fence, no claim and a retention", r, req.Fingerprint)
	}
	if string(r.Outcome.Value) != value || r.Outcome.Failed {
		t.Fatalf("record outcome %+v, want value %q", r.Outcome, value)
	}
	return r
}

func wantAbsent(t *testing.T, s idempotency.Store, id idempotency.ID) {
	t.Helper()
	if r := inspect(t, s, id); r.Exists {
		t.Fatalf("record %+v: want none", r)
	}
}

// waitFor polls cond (the store's own judgement) until it holds.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(3 * time.Millisecond)
	}
}

func do(t *testing.T, k *idempotency.Keeper, req idempotency.Request, fn idempotency.Func) idempotency.Result {
	t.Helper()
	res, err := k.Do(ctxT(t), req, fn)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return res
}

func testSequentialReplay(t *testing.T, tg Target) {
	req := request(t, "a")
	c := &counter{value: "receipt-1"}
	k := newKeeper(t, tg.Store, nil)
	first := do(t, k, req, c.fn)
	if first.Replayed || string(first.Value) != "receipt-1" {
		t.Fatalf("first Do = %+v, want receipt-1, not replayed", first)
	}
	rec := wantCompleted(t, tg.Direct, req, "receipt-1")
	if rec.Expires > 24*time.Hour+time.Second || rec.Expires < 23*time.Hour {
		t.Fatalf("retention %v, want the default 24h", rec.Expires)
	}
	for i, s := range []idempotency.Store{tg.Store, tg.NewClient(t)} {
		again := do(t, newKeeper(t, s, nil), req, c.fn)
		if !again.Replayed || string(again.Value) != "receipt-1" {
			t.Fatalf("repeat %d = %+v, want a replay of receipt-1", i, again)
		}
	}
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times, want 1", c.runs())
	}
	if after := wantCompleted(t, tg.Direct, req, "receipt-1"); after.Fence != rec.Fence {
		t.Fatalf("a replay changed the fence from %d to %d", rec.Fence, after.Fence)
	}
}

func testChangedInput(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	c := &counter{value: "v"}
	do(t, k, req, c.fn)
	other := req
	other.Fingerprint = idempotency.Fingerprint([]byte("other input"))
	_, err := k.Do(ctxT(t), other, c.fn)
	if !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("Do with other input: %v, want ErrMismatch", err)
	}
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times, want 1", c.runs())
	}
	wantCompleted(t, tg.Direct, req, "v")

	// Also while the first request is still running.
	req2 := request(t, "b")
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := k.Do(ctxT(t), req2, func(context.Context, *idempotency.Claim) ([]byte, error) {
			close(started)
			<-finish
			return []byte("x"), nil
		})
		done <- err
	}()
	<-started
	other2 := req2
	other2.Fingerprint = ""
	if _, err := k.Do(ctxT(t), other2, c.fn); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("Do with other input while in progress: %v, want ErrMismatch", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times, want 1", c.runs())
	}
}

func testScopes(t *testing.T, tg Target) {
	a := request(t, "same")
	b := a
	b.Scope += "/other-user"
	k := newKeeper(t, tg.Store, nil)
	ca, cb := &counter{value: "for a"}, &counter{value: "for b"}
	if r := do(t, k, a, ca.fn); r.Replayed || string(r.Value) != "for a" {
		t.Fatalf("a: %+v", r)
	}
	if r := do(t, k, b, cb.fn); r.Replayed || string(r.Value) != "for b" {
		t.Fatalf("b: %+v, want its own execution", r)
	}
	if ca.runs() != 1 || cb.runs() != 1 {
		t.Fatalf("runs %d, %d; want 1 each", ca.runs(), cb.runs())
	}
	wantCompleted(t, tg.Direct, a, "for a")
	wantCompleted(t, tg.Direct, b, "for b")
}

var errBoom = errors.New("boom")

func testErrorReleases(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	var fences []uint64
	runs := 0
	fn := func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		runs++
		fences = append(fences, c.Fence())
		if runs == 1 {
			return []byte("partial"), errBoom
		}
		return []byte("ok"), nil
	}
	res, err := k.Do(ctxT(t), req, fn)
	if !errors.Is(err, errBoom) || res.Value != nil {
		t.Fatalf("Do: %+v %v, want errBoom and no value", res, err)
	}
	var fe *idempotency.FinalError
	if errors.As(err, &fe) {
		t.Fatalf("a plain error came back final: %v", err)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if r := do(t, k, req, fn); r.Replayed || string(r.Value) != "ok" {
		t.Fatalf("retry: %+v, want a new run", r)
	}
	if runs != 2 || fences[1] <= fences[0] {
		t.Fatalf("runs %d, fences %v: want 2 runs with increasing fences", runs, fences)
	}
	wantCompleted(t, tg.Direct, req, "ok")
}

func testFinalError(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	runs := 0
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) {
		runs++
		return []byte(`{"error":"card_declined"}`), idempotency.Final(errors.New("card declined"))
	}
	for i := range 3 {
		res, err := k.Do(ctxT(t), req, fn)
		var fe *idempotency.FinalError
		if !errors.As(err, &fe) || err.Error() != "card declined" {
			t.Fatalf("call %d: %v, want *FinalError \"card declined\"", i, err)
		}
		if string(res.Value) != `{"error":"card_declined"}` || res.Replayed != (i > 0) {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	r := inspect(t, tg.Direct, req.ID())
	if !r.Completed || !r.Outcome.Failed || r.Outcome.Message != "card declined" {
		t.Fatalf("record %+v, want a recorded failure", r)
	}
}

func testStoreErrors(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, &idempotency.Options{Errors: idempotency.StoreErrors})
	runs := 0
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) {
		runs++
		return nil, errBoom
	}
	_, err := k.Do(ctxT(t), req, fn)
	var fe *idempotency.FinalError
	if !errors.As(err, &fe) || !errors.Is(err, errBoom) {
		t.Fatalf("first: %v, want a *FinalError wrapping errBoom", err)
	}
	res, err := k.Do(ctxT(t), req, fn)
	if !errors.As(err, &fe) || err.Error() != errBoom.Error() || !res.Replayed {
		t.Fatalf("replay: %+v %v, want the recorded error", res, err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if r := inspect(t, tg.Direct, req.ID()); !r.Outcome.Failed || r.Outcome.Message != "boom" {
		t.Fatalf("record %+v", r)
	}
}

func testPanic(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	func() {
		defer func() {
			if p := recover(); p != "kaboom" {
				t.Fatalf("recovered %v, want the panic to go on", p)
			}
		}()
		k.Do(ctxT(t), req, func(context.Context, *idempotency.Claim) ([]byte, error) { panic("kaboom") })
	}()
	wantAbsent(t, tg.Direct, req.ID())
	c := &counter{value: "after panic"}
	if r := do(t, k, req, c.fn); r.Replayed || c.runs() != 1 {
		t.Fatalf("retry after panic: %+v, runs %d", r, c.runs())
	}
}

func testRetention(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, &idempotency.Options{Retention: tg.Unit, ClaimTTL: 10 * time.Second})
	var fences []uint64
	fn := func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		fences = append(fences, c.Fence())
		return fmt.Appendf(nil, "run %d", len(fences)), nil
	}
	do(t, k, req, fn)
	rec := wantCompleted(t, tg.Direct, req, "run 1")
	if rec.Expires > tg.Unit {
		t.Fatalf("retention left %v, want at most %v", rec.Expires, tg.Unit)
	}
	if r := do(t, k, req, fn); !r.Replayed {
		t.Fatalf("within retention: %+v, want a replay", r)
	}
	waitFor(t, 10*tg.Unit+5*time.Second, "the record's expiry", func() bool { return !inspect(t, tg.Direct, req.ID()).Exists })
	r := do(t, k, req, fn)
	if r.Replayed || string(r.Value) != "run 2" {
		t.Fatalf("after retention: %+v, want a new run", r)
	}
	if len(fences) != 2 || fences[1] <= fences[0] {
		t.Fatalf("fences %v, want two increasing", fences)
	}
	// A key reused with other input after retention runs as new too.
	waitFor(t, 10*tg.Unit+5*time.Second, "the record's expiry", func() bool { return !inspect(t, tg.Direct, req.ID()).Exists })
	other := req
	other.Fingerprint = "other"
	if r := do(t, k, other, fn); r.Replayed || string(r.Value) != "run 3" {
		t.Fatalf("other input after retention: %+v", r)
	}
}

func testKeepAlive(t *testing.T, tg Target) {
	req := request(t, "a")
	// A claim of a few units, renewed every third of it: a renewal may be
	// late by two thirds of the claim (a loaded machine) before it is lost.
	ttl := max(3*tg.Unit, time.Second)
	k := newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: ttl})
	c := &counter{value: "dup"}
	res := do(t, k, req, func(ctx context.Context, cl *idempotency.Claim) ([]byte, error) {
		// Run well past the claim TTL; the claim must stay held.
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("fn's context ended: %w", context.Cause(ctx))
			case <-time.After(ttl / 4):
			}
			rec := inspect(t, tg.Direct, req.ID())
			if !rec.Exists || rec.Completed || rec.ClaimTTL <= 0 || rec.Fence != cl.Fence() {
				return nil, fmt.Errorf("record while running: %+v, want the live claim with fence %d", rec, cl.Fence())
			}
		}
		if _, err := k.Do(ctx, req, c.fn); !errors.Is(err, idempotency.ErrInProgress) {
			return nil, fmt.Errorf("duplicate after 3 claim TTLs: %v, want ErrInProgress", err)
		}
		return []byte("long"), nil
	})
	if string(res.Value) != "long" || c.runs() != 0 {
		t.Fatalf("%+v, duplicate runs %d", res, c.runs())
	}
	wantCompleted(t, tg.Direct, req, "long")
}

func testInvalid(t *testing.T, tg Target) {
	ctx := ctxT(t)
	good := request(t, "good")
	c := &counter{value: "v"}
	k := newKeeper(t, tg.Store, nil)
	with := func(f func(r *idempotency.Request)) idempotency.Request {
		r := good
		f(&r)
		return r
	}
	reqs := map[string]idempotency.Request{
		"empty key":           with(func(r *idempotency.Request) { r.Key = "" }),
		"key of 256 bytes":    with(func(r *idempotency.Request) { r.Key = strings.Repeat("k", 256) }),
		"key with newline":    with(func(r *idempotency.Request) { r.Key = "a\nb" }),
		"key with DEL":        with(func(r *idempotency.Request) { r.Key = "a\x7f" }),
		"key with UTF-8":      with(func(r *idempotency.Request) { r.Key = "clé" }),
		"empty scope":         with(func(r *idempotency.Request) { r.Scope = "" }),
		"long scope":          with(func(r *idempotency.Request) { r.Scope = strings.Repeat("s", idempotency.MaxScopeLen+1) }),
		"scope bad UTF-8":     with(func(r *idempotency.Request) { r.Scope = "\xff\xfe" }),
		"scope with NUL":      with(func(r *idempotency.Request) { r.Scope = "a\x00b" }),
		"long fingerprint":    with(func(r *idempotency.Request) { r.Fingerprint = strings.Repeat("f", idempotency.MaxFingerprintLen+1) }),
		"fingerprint with SP": with(func(r *idempotency.Request) { r.Fingerprint = "a b" }),
	}
	for name, r := range reqs {
		if _, err := k.Do(ctx, r, c.fn); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A 255-byte key is fine.
	if r := do(t, k, with(func(r *idempotency.Request) { r.Key = strings.Repeat("k", 255) }), c.fn); r.Replayed {
		t.Fatal("a 255-byte key replayed")
	}
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times, want only for the 255-byte key", c.runs())
	}
	for name, o := range map[string]*idempotency.Options{
		"negative claim TTL": {ClaimTTL: -time.Second},
		"claim TTL too long": {ClaimTTL: idempotency.MaxClaimTTL + time.Second},
		"sub-ms retention":   {Retention: time.Microsecond},
		"retention too long": {Retention: idempotency.MaxRetention + time.Hour},
		"bad error policy":   {Errors: 7},
	} {
		if k, err := idempotency.New(tg.Store, o); !errors.Is(err, idempotency.ErrInvalid) || k != nil {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := k.Do(ctx, good, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil fn: %v, want ErrInvalid", err)
	}
	// The store itself refuses bad arguments.
	s, id, tok := tg.Store, good.ID(), idempotency.NewToken()
	b := driver.Begin{ID: id, Fingerprint: good.Fingerprint, Token: tok, ClaimTTL: time.Second, Retention: time.Hour}
	bw := func(f func(b *driver.Begin)) driver.Begin {
		x := b
		f(&x)
		return x
	}
	calls := map[string]func() error{
		"begin empty token": func() error {
			_, err := s.Begin(ctx, bw(func(b *driver.Begin) { b.Token = idempotency.Token{} }))
			return err
		},
		"begin token with SP": func() error {
			_, err := s.Begin(ctx, bw(func(b *driver.Begin) { b.Token = secret.New("a b") }))
			return err
		},
		"begin zero claim TTL": func() error { _, err := s.Begin(ctx, bw(func(b *driver.Begin) { b.ClaimTTL = 0 })); return err },
		"begin zero retention": func() error { _, err := s.Begin(ctx, bw(func(b *driver.Begin) { b.Retention = 0 })); return err },
		"begin bad key":        func() error { _, err := s.Begin(ctx, bw(func(b *driver.Begin) { b.Key = "" })); return err },
		"renew fence 0":        func() error { return s.Renew(ctx, id, tok.Reveal(), 0, time.Second) },
		"renew zero ttl":       func() error { return s.Renew(ctx, id, tok.Reveal(), 1, 0) },
		"complete fence 0":     func() error { return s.Complete(ctx, id, tok.Reveal(), 0, idempotency.Outcome{}, time.Hour) },
		"complete retention 0": func() error { return s.Complete(ctx, id, tok.Reveal(), 1, idempotency.Outcome{}, 0) },
		"release empty token":  func() error { return s.Release(ctx, id, "") },
		"inspect empty scope":  func() error { _, err := s.Inspect(ctx, idempotency.ID{Key: "k"}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if err != nil && strings.Contains(err.Error(), tok.Reveal()) {
			t.Errorf("%s: the error contains the token", name)
		}
	}
	wantAbsent(t, tg.Direct, id)
	for _, r := range reqs {
		if r.Scope != "" && driver.ValidateID(r.ID()) == nil {
			wantAbsent(t, tg.Direct, r.ID())
		}
	}
	// Nothing was written: the good request still runs.
	if r := do(t, k, good, c.fn); r.Replayed || c.runs() != 2 {
		t.Fatalf("good request after the bad ones: %+v, runs %d", r, c.runs())
	}
}

// newKeeper returns a Keeper on s, failing t if New refuses it.
func newKeeper(t testing.TB, s idempotency.Store, o *idempotency.Options) *idempotency.Keeper {
	t.Helper()
	k, err := idempotency.New(s, o)
	if err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	return k
}
