package idempotency_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// nilStore is a Store implementation whose nil pointer is passed inside an
// interface.
type nilStore struct{ idempotency.Store }

// TestNewRefusesBadInput: a nil store, a nil fn, a nil context, a nil Tx,
// a nil Keeper and option values that are NaN, infinite, negative or out of
// range are errors wrapping ErrInvalid, never panics.
func TestNewRefusesBadInput(t *testing.T) {
	s := newMem(t, nil).Idempotency()
	if k, err := idempotency.New(nil, nil); !errors.Is(err, idempotency.ErrInvalid) || k != nil {
		t.Fatalf("New(nil): %v, %v; want ErrInvalid", k, err)
	}
	var typedNil *nilStore
	if k, err := idempotency.New(typedNil, nil); !errors.Is(err, idempotency.ErrInvalid) || k != nil {
		t.Fatalf("New(typed nil): %v, %v; want ErrInvalid", k, err)
	}
	for name, o := range map[string]*idempotency.Options{
		"NaN drift":                {DriftFactor: math.NaN()},
		"+Inf drift":               {DriftFactor: math.Inf(1)},
		"-Inf drift":               {DriftFactor: math.Inf(-1)},
		"negative drift":           {DriftFactor: -0.1},
		"drift 0.5":                {DriftFactor: 0.5},
		"negative claim TTL":       {ClaimTTL: -time.Second},
		"negative retention":       {Retention: -time.Hour},
		"negative margin":          {Margin: -time.Millisecond},
		"margin half the TTL":      {ClaimTTL: time.Second, Margin: 500 * time.Millisecond},
		"negative retry min":       {RetryMin: -time.Millisecond},
		"negative retry max":       {RetryMax: -time.Millisecond},
		"retry max below min":      {RetryMin: time.Second, RetryMax: time.Millisecond},
		"negative release timeout": {ReleaseTimeout: -time.Second},
		"unknown abandoned policy": {Abandoned: 9},
	} {
		if k, err := idempotency.New(s, o); !errors.Is(err, idempotency.ErrInvalid) || k != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalid", name, k, err)
		}
		if _, err := idempotency.Defaults(o); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: Defaults = %v; want ErrInvalid", name, err)
		}
	}
	// Zero means the default; a short claim TTL gets a margin that fits.
	for _, o := range []*idempotency.Options{nil, {}, {ClaimTTL: time.Millisecond}, {DriftFactor: 0.2, Margin: time.Second}} {
		got, err := idempotency.Defaults(o)
		if err != nil {
			t.Fatalf("Defaults(%+v): %v", o, err)
		}
		if v := time.Duration(float64(got.ClaimTTL)*(1-got.DriftFactor)) - got.Margin; v <= 0 {
			t.Fatalf("Defaults(%+v): validity %v, want positive", o, v)
		}
	}

	k := newKeeper(t, s, nil)
	ctx := t.Context()
	req := idempotency.Request{Scope: "s", Key: "k"}
	fn := func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, nil }
	if _, err := k.Do(ctx, req, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil fn: %v", err)
	}
	//lint:ignore SA1012 a nil context is the invalid input under test
	if _, err := k.Do(nil, req, fn); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil ctx: %v", err)
	}
	if _, err := k.DoTx(ctx, nil, req, fn); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil Tx: %v", err)
	}
	var nk *idempotency.Keeper
	if _, err := nk.Do(ctx, req, fn); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil Keeper Do: %v", err)
	}
	if _, err := nk.Recover(ctx, req, fn); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil Keeper Recover: %v", err)
	}
	if mw, err := nk.Middleware(nil); !errors.Is(err, idempotency.ErrInvalid) || mw != nil {
		t.Fatalf("nil Keeper Middleware: %v", err)
	}
	if mw, err := k.Middleware(&idempotency.HTTPOptions{MaxBodyBytes: -1}); !errors.Is(err, idempotency.ErrInvalid) || mw != nil {
		t.Fatalf("negative MaxBodyBytes: %v", err)
	}
	// Nothing was written.
	if rec, err := s.Inspect(ctx, req.ID()); err != nil || rec.Exists {
		t.Fatalf("record after refused calls: %+v %v", rec, err)
	}
}
