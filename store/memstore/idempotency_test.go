package memstore_test

import (
	"testing"

	"github.com/tenurekit/tenure/idempotency/idempotencytest"
)

// TestIdempotencyConformance runs the idempotency suite on memstore, with
// client-side faults (there is no network to break).
func TestIdempotencyConformance(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target {
		s := newMem(t, nil)
		wrapped, faults := idempotencytest.Wrap(s.Idempotency())
		return idempotencytest.Target{Store: wrapped, Direct: s.Idempotency(), Faults: faults}
	})
}
