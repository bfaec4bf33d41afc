package session_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tenurekit/tenure/internal/obs/obstest"
	"github.com/tenurekit/tenure/session"
)

func TestTelemetryCountsOperations(t *testing.T) {
	tl := obstest.New()
	m, err := session.New(newMem(t, nil).Sessions(), &session.Options{MeterProvider: tl.Meter, TracerProvider: tl.Tracer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok, s, err := m.Create(ctx, "user-secret-42", map[string]string{"cart": "1"})
	if err != nil {
		t.Fatal(err)
	}
	stale, err := m.Load(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	s.Set("cart", "2")
	if err := m.Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(ctx, stale); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("stale save: %v, want ErrConflict", err)
	}
	if err := m.Revoke(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Load(ctx, tok); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("load after revoke: %v, want ErrNotFound", err)
	}
	for _, c := range []struct {
		op, outcome string
		want        int64
	}{
		{"create", "ok", 1}, {"load", "ok", 1}, {"save", "ok", 1}, {"save", "conflict", 1},
		{"revoke", "ok", 1}, {"load", "not_found", 1},
	} {
		if got := tl.Count(t, "tenure.session.operations", map[string]string{"store": "memstore", "op": c.op, "outcome": c.outcome}); got != c.want {
			t.Errorf("session.operations{op=%s,outcome=%s} = %d, want %d", c.op, c.outcome, got, c.want)
		}
	}
	if got := tl.Observations(t, "tenure.store.duration", map[string]string{"op": "session.save"}); got != 2 {
		t.Errorf("store.duration{op=session.save} has %d values, want 2", got)
	}
	values := tl.AttributeValues(t)
	for _, secret := range []string{"user-secret-42", string(s.ID()), tok.Reveal()} {
		if slices.Contains(values, secret) {
			t.Errorf("%q is an attribute value", secret)
		}
	}
}
