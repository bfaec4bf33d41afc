package tenure_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
)

// Every primitive's sentinel matches its kind, wrapped or not, and no
// other kind; and it stays distinct from the other primitives' sentinels
// of the same kind.
func TestSentinelsMatchTheirKind(t *testing.T) {
	kinds := []error{tenure.ErrInvalid, tenure.ErrUnavailable, tenure.ErrNotFound, tenure.ErrConflict, tenure.ErrLost, tenure.ErrStale}
	cases := []struct {
		name     string
		sentinel error
		kind     error
	}{
		{"lease.ErrInvalid", lease.ErrInvalid, tenure.ErrInvalid},
		{"idempotency.ErrInvalid", idempotency.ErrInvalid, tenure.ErrInvalid},
		{"ratelimit.ErrInvalid", ratelimit.ErrInvalid, tenure.ErrInvalid},
		{"session.ErrInvalid", session.ErrInvalid, tenure.ErrInvalid},
		{"schedule.ErrInvalid", schedule.ErrInvalid, tenure.ErrInvalid},
		{"retention.ErrInvalid", retention.ErrInvalid, tenure.ErrInvalid},
		{"client.ErrInvalid", client.ErrInvalid, tenure.ErrInvalid},
		{"lease.ErrUnavailable", lease.ErrUnavailable, tenure.ErrUnavailable},
		{"idempotency.ErrUnavailable", idempotency.ErrUnavailable, tenure.ErrUnavailable},
		{"ratelimit.ErrUnavailable", ratelimit.ErrUnavailable, tenure.ErrUnavailable},
		{"session.ErrUnavailable", session.ErrUnavailable, tenure.ErrUnavailable},
		{"schedule.ErrUnavailable", schedule.ErrUnavailable, tenure.ErrUnavailable},
		{"session.ErrNotFound", session.ErrNotFound, tenure.ErrNotFound},
		{"idempotency.ErrNotFound", idempotency.ErrNotFound, tenure.ErrNotFound},
		{"schedule.ErrNotFound", schedule.ErrNotFound, tenure.ErrNotFound},
		{"session.ErrConflict", session.ErrConflict, tenure.ErrConflict},
		{"idempotency.ErrChanged", idempotency.ErrChanged, tenure.ErrConflict},
		{"lease.ErrNotHeld", lease.ErrNotHeld, tenure.ErrLost},
		{"lease.ErrLost", lease.ErrLost, tenure.ErrLost},
		{"idempotency.ErrClaimLost", idempotency.ErrClaimLost, tenure.ErrLost},
		{"ratelimit.ErrPermitLost", ratelimit.ErrPermitLost, tenure.ErrLost},
		{"fence.ErrStale", fence.ErrStale, tenure.ErrStale},
		{"schedule.ErrStale", schedule.ErrStale, tenure.ErrStale},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("op: %w", c.sentinel)
		for _, k := range kinds {
			if got, want := errors.Is(wrapped, k), k == c.kind; got != want {
				t.Errorf("errors.Is(wrapped %s, %v) = %v, want %v", c.name, k, got, want)
			}
		}
		if !errors.Is(wrapped, c.sentinel) {
			t.Errorf("a wrapped %s does not match itself", c.name)
		}
		for _, o := range cases {
			if o.sentinel != c.sentinel && errors.Is(c.sentinel, o.sentinel) {
				t.Errorf("%s matches %s", c.name, o.name)
			}
		}
	}
}

// A store constructor's refusal is of kind ErrInvalid, whichever primitive
// the caller came for.
func TestConstructorRefusalIsInvalid(t *testing.T) {
	s, err := memstore.New(&memstore.Options{LimitKeys: -1})
	if s != nil || !errors.Is(err, tenure.ErrInvalid) {
		t.Fatalf("memstore.New(LimitKeys -1) = %v, %v; want an error of kind tenure.ErrInvalid", s, err)
	}
}
