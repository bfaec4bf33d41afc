package idempotencytest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// txDo runs DoTx in a transaction of the target whose fn adds a business
// row named name and returns value; after DoTx, then(err) decides what
// body returns (nil commits).
func txDo(t *testing.T, tg Target, k *idempotency.Keeper, req idempotency.Request, name, value string, then func(error) error) (idempotency.Result, error, error) {
	t.Helper()
	var (
		res   idempotency.Result
		doErr error
	)
	runErr := tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
		res, doErr = k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			if err := biz.Add(ctx, name); err != nil {
				return nil, err
			}
			return []byte(value), nil
		})
		return then(doErr)
	})
	return res, doErr, runErr
}

func count(t *testing.T, tg Target, name string) int {
	t.Helper()
	n, err := tg.Tx.Count(ctxT(t), name)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

func commitUnlessErr(err error) error { return err }

func testTxCommit(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	res, doErr, runErr := txDo(t, tg, k, req, name, "receipt", commitUnlessErr)
	if doErr != nil || runErr != nil || res.Replayed || string(res.Value) != "receipt" {
		t.Fatalf("first: %+v %v %v", res, doErr, runErr)
	}
	if n := count(t, tg, name); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	wantCompleted(t, tg.Direct, req, "receipt")
	// Replays, in a transaction and outside one.
	res, doErr, runErr = txDo(t, tg, k, req, name, "other", commitUnlessErr)
	if doErr != nil || runErr != nil || !res.Replayed || string(res.Value) != "receipt" {
		t.Fatalf("replay in a transaction: %+v %v %v", res, doErr, runErr)
	}
	c := &counter{value: "x"}
	if r := do(t, k, req, c.fn); !r.Replayed || string(r.Value) != "receipt" || c.runs() != 0 {
		t.Fatalf("replay outside: %+v", r)
	}
	other := req
	other.Fingerprint = "changed"
	if _, doErr, _ := txDo(t, tg, k, other, name, "x", commitUnlessErr); !errors.Is(doErr, idempotency.ErrMismatch) {
		t.Fatalf("other input: %v, want ErrMismatch", doErr)
	}
	if n := count(t, tg, name); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	// A record completed outside a transaction replays inside one.
	req2 := request(t, "b")
	do(t, k, req2, (&counter{value: "outside"}).fn)
	res, doErr, _ = txDo(t, tg, k, req2, name+"2", "inside", commitUnlessErr)
	if doErr != nil || !res.Replayed || string(res.Value) != "outside" || count(t, tg, name+"2") != 0 {
		t.Fatalf("transactional replay of a record from Do: %+v %v", res, doErr)
	}
}

var errLater = errors.New("a later statement of the transaction failed")

func testTxFailed(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	// DoTx succeeds, then the transaction fails: record and row roll back.
	_, doErr, runErr := txDo(t, tg, k, req, name, "receipt", func(err error) error {
		if err != nil {
			return err
		}
		return errLater
	})
	if doErr != nil || !errors.Is(runErr, errLater) {
		t.Fatalf("failed transaction: %v, %v", doErr, runErr)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if n := count(t, tg, name); n != 0 {
		t.Fatalf("%d business rows after the rollback, want 0", n)
	}
	// The retry runs once.
	res, doErr, runErr := txDo(t, tg, k, req, name, "receipt", commitUnlessErr)
	if doErr != nil || runErr != nil || res.Replayed {
		t.Fatalf("retry: %+v %v %v", res, doErr, runErr)
	}
	res, _, _ = txDo(t, tg, k, req, name, "receipt", commitUnlessErr)
	if !res.Replayed {
		t.Fatal("second retry not replayed")
	}
	if n := count(t, tg, name); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	wantCompleted(t, tg.Direct, req, "receipt")
}

func testTxError(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	// fn writes a row and fails; the caller commits anyway: DoTx left the
	// transaction as before the call, so neither row nor claim lands.
	runErr := tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
		_, err := k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			if err := biz.Add(ctx, name); err != nil {
				return nil, err
			}
			return nil, errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("DoTx: %v, want errBoom", err)
		}
		if idempotency.Recorded(err) {
			t.Errorf("Recorded(%v) = true for a plain error", err)
		}
		return nil
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if n := count(t, tg, name); n != 0 {
		t.Fatalf("%d business rows, want 0", n)
	}
	if res, doErr, _ := txDo(t, tg, k, req, name, "ok", commitUnlessErr); doErr != nil || res.Replayed {
		t.Fatalf("retry: %+v %v", res, doErr)
	}
	if n := count(t, tg, name); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

func testTxPanic(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	// fn writes a row and panics; the caller recovers and commits anyway:
	// DoTx rolled back to its savepoint, so neither row nor claim lands.
	runErr := tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
		defer func() {
			if p := recover(); p != errBoom {
				t.Errorf("recovered %v, want fn's panic", p)
			}
		}()
		k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			if err := biz.Add(ctx, name); err != nil {
				return nil, err
			}
			panic(errBoom)
		})
		t.Error("DoTx returned after fn panicked")
		return nil
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if n := count(t, tg, name); n != 0 {
		t.Fatalf("%d business rows, want 0", n)
	}
	if res, doErr, _ := txDo(t, tg, k, req, name, "ok", commitUnlessErr); doErr != nil || res.Replayed {
		t.Fatalf("retry: %+v %v", res, doErr)
	}
	if n := count(t, tg, name); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

func testTxFinal(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	runErr := tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
		res, err := k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
			if err := biz.Add(ctx, name); err != nil {
				return nil, err
			}
			return []byte("declined"), idempotency.Final(errors.New("card declined"))
		})
		if !idempotency.Recorded(err) || err.Error() != "card declined" || string(res.Value) != "declined" {
			t.Errorf("DoTx: %+v %v, want a recorded final error", res, err)
		}
		return nil // commit the recorded failure
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	if n := count(t, tg, name); n != 0 {
		t.Fatalf("%d business rows, want 0: a final error keeps the record, not fn's writes", n)
	}
	r := inspect(t, tg.Direct, req.ID())
	if !r.Completed || !r.Outcome.Failed || r.Outcome.Message != "card declined" || string(r.Outcome.Value) != "declined" {
		t.Fatalf("record %+v", r)
	}
	res, doErr, _ := txDo(t, tg, k, req, name, "x", func(err error) error {
		if idempotency.Recorded(err) {
			return nil
		}
		return err
	})
	var fe *idempotency.FinalError
	if !errors.As(doErr, &fe) || !res.Replayed || doErr.Error() != "card declined" {
		t.Fatalf("replay: %+v %v", res, doErr)
	}
	if n := count(t, tg, name); n != 0 {
		t.Fatalf("%d business rows, want 0", n)
	}
}

func testTxConcurrent(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	const n = 50
	var runs atomic.Int32
	results := make([]idempotency.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		k := newKeeper(t, tg.Store, nil)
		wg.Go(func() {
			<-start
			errs[i] = tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
				var err error
				results[i], err = k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
					runs.Add(1)
					if err := biz.Add(ctx, name); err != nil {
						return nil, err
					}
					time.Sleep(30 * time.Millisecond) // hold the transaction open
					return []byte("once"), nil
				})
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("duplicate %d: %v", i, errs[i])
		}
		if string(results[i].Value) != "once" {
			t.Fatalf("duplicate %d got %q", i, results[i].Value)
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if runs.Load() != 1 || fresh != 1 {
		t.Fatalf("fn ran %d times, %d fresh results; want 1 and 1", runs.Load(), fresh)
	}
	if c := count(t, tg, name); c != 1 {
		t.Fatalf("%d business rows, want 1", c)
	}
	wantCompleted(t, tg.Direct, req, "once")
}

func testTxAfterRollback(t *testing.T, tg Target) {
	req := request(t, "a")
	name := req.Scope + "/row"
	k := newKeeper(t, tg.Store, nil)
	var (
		mu    sync.Mutex
		order []string
	)
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	claimed, rollback := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- tg.Tx.Run(ctxT(t), func(tx idempotency.Tx, biz Business) error {
			_, err := k.DoTx(ctxT(t), tx, req, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
				if err := biz.Add(ctx, name); err != nil {
					return nil, err
				}
				close(claimed)
				<-rollback
				note("first fn")
				return []byte("first"), nil
			})
			if err != nil {
				return err
			}
			note("first rolls back")
			return errLater
		})
	}()
	<-claimed
	secondDone := make(chan idempotency.Result, 1)
	go func() {
		res, doErr, runErr := txDo(t, tg, k, req, name, "second", func(err error) error {
			note("second returns")
			return err
		})
		if doErr != nil || runErr != nil {
			t.Errorf("second: %v %v", doErr, runErr)
		}
		secondDone <- res
	}()
	time.Sleep(50 * time.Millisecond) // let the second reach the claim and wait
	close(rollback)
	if err := <-firstDone; !errors.Is(err, errLater) {
		t.Fatalf("first: %v", err)
	}
	res := <-secondDone
	if res.Replayed || string(res.Value) != "second" {
		t.Fatalf("second after the first rolled back: %+v, want its own run", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[0] != "first fn" || order[1] != "first rolls back" || order[2] != "second returns" {
		t.Fatalf("order %v: the duplicate must wait for the first transaction", order)
	}
	if c := count(t, tg, name); c != 1 {
		t.Fatalf("%d business rows, want 1", c)
	}
	wantCompleted(t, tg.Direct, req, "second")
}
