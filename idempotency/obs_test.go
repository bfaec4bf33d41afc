package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/obs/obstest"
)

func TestTelemetryCountsRequests(t *testing.T) {
	tl := obstest.New()
	k, err := idempotency.New(newMem(t, nil).Idempotency(), &idempotency.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := idempotency.Request{Scope: "user:secret-principal", Key: "key-secret-1", Fingerprint: "a"}
	ok := func(context.Context, *idempotency.Claim) ([]byte, error) { return []byte("v"), nil }
	if _, err := k.Do(ctx, req, ok); err != nil {
		t.Fatal(err)
	}
	if res, err := k.Do(ctx, req, ok); err != nil || !res.Replayed {
		t.Fatalf("replay: %v %v", res, err)
	}
	other := req
	other.Fingerprint = "b"
	if _, err := k.Do(ctx, other, ok); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	failing := idempotency.Request{Scope: "s", Key: "k2"}
	if _, err := k.Do(ctx, failing, func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, errors.New("boom") }); err == nil {
		t.Fatal("fn's error was lost")
	}
	// A final error is recorded: executed, then replayed.
	final := idempotency.Request{Scope: "s", Key: "k3"}
	fnFinal := func(context.Context, *idempotency.Claim) ([]byte, error) {
		return nil, idempotency.Final(errors.New("declined"))
	}
	for range 2 {
		if _, err := k.Do(ctx, final, fnFinal); !idempotency.Recorded(err) {
			t.Fatalf("final: %v", err)
		}
	}
	// In progress: a second request while the first one runs.
	busy := idempotency.Request{Scope: "s", Key: "k4"}
	_, err = k.Do(ctx, busy, func(ctx context.Context, _ *idempotency.Claim) ([]byte, error) {
		_, err := k.Do(ctx, busy, ok)
		var ip *idempotency.InProgressError
		if !errors.As(err, &ip) {
			t.Errorf("nested: %v, want InProgressError", err)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Do(ctx, idempotency.Request{Scope: "s", Key: ""}, ok); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("invalid: %v", err)
	}
	for oc, want := range map[string]int64{"executed": 3, "replayed": 2, "mismatch": 1, "failed": 1, "in_progress": 1, "error": 1, "unknown": 0, "claim_lost": 0} {
		if got := tl.Count(t, "tenure.idempotency.requests", map[string]string{"store": "memstore", "outcome": oc}); got != want {
			t.Errorf("requests{outcome=%s} = %d, want %d", oc, got, want)
		}
	}
	if got := tl.Observations(t, "tenure.store.duration", map[string]string{"op": "idempotency.complete", "outcome": "ok"}); got != 3 {
		t.Errorf("store.duration{op=idempotency.complete} has %d values, want 3", got)
	}
	values := tl.AttributeValues(t)
	for _, secret := range []string{req.Scope, req.Key} {
		if slices.Contains(values, secret) {
			t.Errorf("%q is an attribute value", secret)
		}
	}
}

func TestTelemetryAbandonedClaimIsUnknownAndLogged(t *testing.T) {
	tl := obstest.New()
	var logs bytes.Buffer
	store := newMem(t, nil).Idempotency()
	k, err := idempotency.New(store, &idempotency.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer,
		ClaimTTL: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := idempotency.Request{Scope: "s", Key: "abandoned"}
	// A claim whose executor died: taken directly on the store, never completed.
	if _, err := store.Begin(ctx, driver.Begin{ID: req.ID(), Token: idempotency.NewToken(), ClaimTTL: 20 * time.Millisecond, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var ue *idempotency.UnknownError
	for {
		_, err := k.Do(ctx, req, func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, nil })
		if errors.As(err, &ue) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim never read as abandoned: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := tl.Count(t, "tenure.idempotency.requests", map[string]string{"outcome": "unknown"}); got != 1 {
		t.Errorf("requests{outcome=unknown} = %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "expired without a recorded result") {
		t.Errorf("no warning for the abandoned claim: %q", logs.String())
	}
}
