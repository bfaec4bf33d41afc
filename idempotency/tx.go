package idempotency

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
)

// DoTx is Do inside the caller's own database transaction, for SQL stores
// (see [Tx]): the claim, fn's writes and the recorded result are all in tx,
// so they commit or roll back together. A transaction that fails leaves no
// record, and a retry runs fn again.
//
// A concurrent duplicate's DoTx waits for the first transaction: when that
// commits, the duplicate replays its result; when it rolls back, the
// duplicate claims the record and runs fn itself. (Use READ COMMITTED on
// PostgreSQL: under REPEATABLE READ or SERIALIZABLE the waiting duplicate
// fails with a serialization error instead.)
//
// fn gets a claim whose fence is greater than every earlier claim's on the
// record; its validity is the transaction's (Done never closes). The
// answers are Do's: a replay, ErrMismatch, an *InProgressError for a
// record claimed by Do outside a transaction (or waiting, with
// Options.Wait), an *UnknownError for an abandoned one.
//
// After an error DoTx leaves tx as it was before the call (fn's writes and
// the claim rolled back to a savepoint), and the caller should roll back.
// A final error (see [Final]) is recorded in tx without fn's writes and
// returned as a *FinalError: commit tx to keep the record. If fn panics
// (or calls runtime.Goexit), DoTx rolls back to its savepoint, drops the
// claim and lets the panic go on; roll the transaction back. Apart from a
// recorded *FinalError, Result is empty whenever the error is not nil.
func (k *Keeper) DoTx(ctx context.Context, tx Tx, req Request, fn Func) (Result, error) {
	return k.observe(ctx, req, fn, func(ctx context.Context, fn Func) (Result, error) { return k.doTx(ctx, tx, req, fn) })
}

func (k *Keeper) doTx(ctx context.Context, tx Tx, req Request, fn Func) (Result, error) {
	if err := k.check(ctx, req, fn); err != nil {
		return Result{}, err
	}
	if isNil(tx) {
		return Result{}, fmt.Errorf("%w: idempotency: nil Tx", ErrInvalid)
	}
	tx = newTimedTx(tx, k.tel)
	token := NewToken()
	b, err := k.claimWaiting(ctx, req, func(ctx context.Context) (driver.Begun, error) {
		return tx.Claim(ctx, k.begin(req, token, k.o.Abandoned == Rerun))
	})
	if err != nil {
		return Result{}, err
	}
	if b.State != driver.Claimed {
		k.abandoned(ctx, req, b)
		return k.answer(req, b)
	}
	return k.runTx(ctx, tx, req, token, b.Fence, fn)
}

func (k *Keeper) runTx(ctx context.Context, tx Tx, req Request, token Token, fence uint64, fn Func) (Result, error) {
	id := req.ID()
	// However fn ends without returning (a panic, which the caller may
	// recover, or runtime.Goexit), fn's writes and the claim are rolled
	// back to the savepoint before the panic goes on, so that a caller
	// who commits anyway leaves no claim behind.
	returned := false
	defer func() {
		if !returned {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.o.ReleaseTimeout)
			defer cancel()
			if err := tx.Undo(uctx); err == nil {
				_ = tx.Release(uctx, id, token.Reveal())
			}
		}
	}()
	value, fnErr := fn(ctx, newTxClaim(id, token, fence))
	returned = true
	if fnErr != nil && !k.final(fnErr) {
		if err := tx.Undo(ctx); err != nil {
			return Result{}, errors.Join(fnErr, fmt.Errorf("idempotency: roll back to the savepoint: %w", err))
		}
		if err := tx.Release(ctx, id, token.Reveal()); err != nil {
			return Result{}, errors.Join(fnErr, fmt.Errorf("idempotency: drop the claim: %w", err))
		}
		return Result{}, fnErr
	}
	if fnErr != nil {
		fnErr = Final(fnErr)
		if err := tx.Undo(ctx); err != nil {
			return Result{}, errors.Join(fnErr, fmt.Errorf("idempotency: roll back to the savepoint: %w", err))
		}
	}
	if err := tx.Complete(ctx, id, token.Reveal(), fence, k.outcome(value, fnErr), k.o.Retention); err != nil {
		return Result{}, errors.Join(&recordError{err}, fnErr)
	}
	return Result{Value: value}, fnErr
}

// Recorded reports whether an error of DoTx leaves a result recorded in
// the transaction: a *FinalError, which the caller commits to keep (a
// replayed one wrote nothing, and committing is harmless). After any other
// error the caller rolls back.
func Recorded(err error) bool {
	var fe *FinalError
	var re *recordError
	return errors.As(err, &fe) && !errors.As(err, &re)
}

// recordError reports that DoTx could not write the result.
type recordError struct{ err error }

func (e *recordError) Error() string { return "idempotency: record the result: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }
