package idempotency_test

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
)

// counting counts the store calls of each kind.
type counting struct {
	idempotency.Store
	begins, renews, completes, releases atomic.Int32
}

func (c *counting) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	c.begins.Add(1)
	return c.Store.Begin(ctx, b)
}

func (c *counting) Renew(ctx context.Context, id idempotency.ID, tok string, f uint64, ttl time.Duration) error {
	c.renews.Add(1)
	return c.Store.Renew(ctx, id, tok, f, ttl)
}

func (c *counting) Complete(ctx context.Context, id idempotency.ID, tok string, f uint64, o idempotency.Outcome, r time.Duration) error {
	c.completes.Add(1)
	return c.Store.Complete(ctx, id, tok, f, o, r)
}

func (c *counting) Release(ctx context.Context, id idempotency.ID, tok string) error {
	c.releases.Add(1)
	return c.Store.Release(ctx, id, tok)
}

var req = idempotency.Request{Scope: "user:1 POST /orders", Key: "order-1", Fingerprint: "fp"}

// TestKeepAliveOnFakeClock: a 30s claim held for 100s of work is renewed
// every 10s, and the first execution costs one Begin and one Complete.
func TestKeepAliveOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &counting{Store: newMem(t, nil).Idempotency()}
		k := newKeeper(t, s, nil)
		res, err := k.Do(t.Context(), req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
			time.Sleep(100 * time.Second)
			if ctx.Err() != nil || c.Err() != nil {
				t.Errorf("claim ended while renewed: %v", c.Err())
			}
			return []byte("ok"), nil
		})
		if err != nil || string(res.Value) != "ok" {
			t.Fatalf("Do: %+v %v", res, err)
		}
		if s.begins.Load() != 1 || s.completes.Load() != 1 || s.releases.Load() != 0 {
			t.Fatalf("begins %d completes %d releases %d", s.begins.Load(), s.completes.Load(), s.releases.Load())
		}
		if n := s.renews.Load(); n < 9 || n > 10 {
			t.Fatalf("%d renewals in 100s with a 30s claim, want one per 10s", n)
		}
		// A replay is one Begin.
		if r, err := k.Do(t.Context(), req, nil); !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("nil fn: %+v %v", r, err)
		}
		if r, _ := k.Do(t.Context(), req, func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, nil }); !r.Replayed || s.begins.Load() != 2 {
			t.Fatalf("replay: %+v, begins %d", r, s.begins.Load())
		}
	})
}

// TestValidityRunsOutWhenRenewalsFail: with the store cut off, fn's
// context ends when the claim's validity runs out, before the store's
// claim expires (TTL minus drift and margin), with ErrClaimLost as cause.
func TestValidityRunsOutWhenRenewalsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, faults := idempotencytest.Wrap(newMem(t, nil).Idempotency())
		k := newKeeper(t, w, &idempotency.Options{ClaimTTL: 30 * time.Second})
		start := time.Now()
		_, err := k.Do(t.Context(), req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
			faults.Cut()
			<-ctx.Done()
			if el := time.Since(start); el >= 30*time.Second || el < 29*time.Second {
				t.Errorf("fn's context ended after %v, want just before the 30s claim", el)
			}
			if !errors.Is(context.Cause(ctx), idempotency.ErrClaimLost) || !errors.Is(c.Err(), idempotency.ErrClaimLost) {
				t.Errorf("cause %v, claim err %v; want ErrClaimLost", context.Cause(ctx), c.Err())
			}
			faults.Heal()
			return []byte("late"), nil
		})
		// Nobody took over: the late result is still recorded.
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	})
}

// TestCompleteOutcomeUnknown: when the result cannot be recorded, Do says
// the outcome is unknown, gives no value with the error, and gives up after one claim
// TTL of retries.
func TestCompleteOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, faults := idempotencytest.Wrap(newMem(t, nil).Idempotency())
		k := newKeeper(t, w, &idempotency.Options{ClaimTTL: 3 * time.Second})
		res, err := k.Do(t.Context(), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
			faults.Cut()
			return []byte("done"), nil
		})
		var ue *idempotency.UnknownError
		if !errors.As(err, &ue) || !ue.Ran || !errors.Is(err, idempotency.ErrUnavailable) || res.Value != nil {
			t.Fatalf("Do: %+v %v, want no value and an *UnknownError (ran) wrapping ErrUnavailable", res, err)
		}
		if !strings.Contains(err.Error(), "could not be recorded") {
			t.Fatalf("message %q", err)
		}
	})
}

func TestFinalAndRecorded(t *testing.T) {
	if idempotency.Final(nil) != nil {
		t.Fatal("Final(nil) != nil")
	}
	base := errors.New("x")
	f := idempotency.Final(base)
	if idempotency.Final(f) != f || !errors.Is(f, base) || !idempotency.Recorded(f) || idempotency.Recorded(base) {
		t.Fatal("Final/Recorded")
	}
	if got := driver.CleanMessage("a\x00b\xff" + strings.Repeat("é", 3000)); len(got) > idempotency.MaxMessageLen ||
		strings.ContainsRune(got, 0) || !strings.HasPrefix(got, "a\uFFFDb\uFFFD") {
		t.Fatalf("CleanMessage: %q…", got[:10])
	}
	if a, b := idempotency.Fingerprint([]byte("ab"), []byte("c")), idempotency.Fingerprint([]byte("a"), []byte("bc")); a == b || len(a) != 64 {
		t.Fatal("Fingerprint is ambiguous")
	}
}

// TestClaimRedacts: a claim never prints its token.
func TestClaimRedacts(t *testing.T) {
	s := newMem(t, nil).Idempotency()
	k := newKeeper(t, s, nil)
	k.Do(t.Context(), req, func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		for _, out := range []string{c.String(), fmtAll(c)} {
			if strings.Contains(out, c.Token().Reveal()) || !strings.Contains(out, "REDACTED") {
				t.Errorf("claim printed as %q", out)
			}
		}
		return nil, nil
	})
}
