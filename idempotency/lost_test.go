package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// stalling is a Store whose renewals fail as unreachable while stalled is
// set, so that the claim expires on the store while fn runs.
type stalling struct {
	idempotency.Store
	stalled atomic.Bool
}

func (s *stalling) Renew(ctx context.Context, id idempotency.ID, tok string, f uint64, ttl time.Duration) error {
	if s.stalled.Load() {
		return idempotency.ErrUnavailable
	}
	return s.Store.Renew(ctx, id, tok, f, ttl)
}

// TestClaimLostGivesNoValue: when a stalled fn's claim is taken over by a
// later attempt, Do returns no value with the error, and the error wraps
// ErrClaimLost, also when fn returns an error of its own (which it wraps
// too); the later attempt's result stands.
func TestClaimLostGivesNoValue(t *testing.T) {
	for name, fnErr := range map[string]error{
		"value":       nil,
		"plain error": errors.New("gateway timeout"),
		"final error": idempotency.Final(errors.New("card declined")),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				direct := newMem(t, nil).Idempotency()
				s := &stalling{Store: direct}
				a := newKeeper(t, s, &idempotency.Options{ClaimTTL: 3 * time.Second})
				b := newKeeper(t, direct, &idempotency.Options{Abandoned: idempotency.Rerun})
				res, err := a.Do(t.Context(), req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
					s.stalled.Store(true)
					<-ctx.Done()
					time.Sleep(time.Second) // past the claim on the store
					r, err := b.Do(context.WithoutCancel(ctx), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
						return []byte("B"), nil
					})
					if err != nil || string(r.Value) != "B" {
						t.Errorf("B's takeover: %+v %v", r, err)
					}
					return []byte("A"), fnErr
				})
				if !errors.Is(err, idempotency.ErrClaimLost) {
					t.Fatalf("A: %+v %v; want ErrClaimLost", res, err)
				}
				if fnErr != nil && !errors.Is(err, fnErr) {
					t.Fatalf("A: %v; want fn's error wrapped too", err)
				}
				if res.Value != nil || res.Replayed {
					t.Fatalf("A's result %+v with an error, want none", res)
				}
				rec, err := direct.Inspect(t.Context(), req.ID())
				if err != nil || !rec.Completed || string(rec.Outcome.Value) != "B" {
					t.Fatalf("record %+v %v; want B's result", rec, err)
				}
			})
		})
	}
}

// TestValidityRanOutWithError: fn returns an error after its claim's
// validity ran out (nobody took it over): the error still reports the
// lost claim, wraps fn's error, and the claim is released.
func TestValidityRanOutWithError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		direct := newMem(t, nil).Idempotency()
		s := &stalling{Store: direct}
		k := newKeeper(t, s, &idempotency.Options{ClaimTTL: 3 * time.Second})
		res, err := k.Do(t.Context(), req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
			s.stalled.Store(true)
			<-ctx.Done()
			return []byte("partial"), ctx.Err()
		})
		if !errors.Is(err, idempotency.ErrClaimLost) || !errors.Is(err, context.Canceled) || res.Value != nil {
			t.Fatalf("Do: %+v %v; want no value and an error wrapping ErrClaimLost and fn's", res, err)
		}
		if rec, err := direct.Inspect(t.Context(), req.ID()); err != nil || rec.Exists {
			t.Fatalf("record %+v %v; want released", rec, err)
		}
	})
}
