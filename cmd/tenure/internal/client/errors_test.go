package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/session"
)

// TestErrorsMapToPrimitives: problems unwrap to the primitive's errors (a
// held key to a *lease.HeldError with the holder's TTL), refusals the
// primitive has no error for fail closed as ErrUnavailable with the
// problem attached, and neither the bearer token nor a lease token shows
// in an error.
func TestErrorsMapToPrimitives(t *testing.T) {
	s := startSQLite(t, "", nil)
	c := newClient(t, s.url, nil)
	ctx := t.Context()
	tok := lease.NewToken()
	if _, err := c.Leases().Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := c.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Key != "k" || held.TTL <= 0 || held.TTL > time.Minute {
		t.Fatalf("held: %v", err)
	}
	if _, err := c.Leases().Renew(ctx, "k", lease.NewToken(), time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("renew by another token: %v", err)
	}
	if _, err := c.Sessions().Load(ctx, session.ID(strings.Repeat("ab", 34)), 0); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("load: %v", err)
	}
	bad, err := client.New(s.url, &client.Options{Token: "wrong-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Leases().Inspect(ctx, "k")
	var ce *client.Error
	if !errors.Is(err, lease.ErrUnavailable) || !errors.As(err, &ce) || ce.Type != serveapi.TypeUnauthorized || ce.Status != 401 {
		t.Fatalf("unauthorized: %v", err)
	}
	for _, e := range []error{err, fmt.Errorf("%+v", ce)} {
		if strings.Contains(e.Error(), "wrong-token") || strings.Contains(e.Error(), tok) {
			t.Fatalf("an error shows a token: %v", e)
		}
	}
	// Unreachable: ErrUnavailable.
	s.stop()
	if _, err := c.Leases().Inspect(ctx, "k"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("unreachable: %v", err)
	}
	if _, err := client.New("ftp://x", nil); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("bad URL: %v", err)
	}
}
