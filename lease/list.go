package lease

import (
	"context"
	"fmt"
)

// MaxListLimit is the most keys one List call returns.
const MaxListLimit = 1000

// Lister is implemented by stores that can list the keys they hold
// (memstore, sqlitestore, pgstore, redisstore, etcdstore). It is optional: a Store without it still meets
// the contract, and callers check for it with a type assertion.
type Lister interface {
	// List returns the state of the keys that start with prefix and sort
	// after after (byte order; "" starts at the first), in key order, at
	// most limit of them (1 to MaxListLimit). A key appears while the store
	// remembers it: held, or released or expired with its last fence.
	List(ctx context.Context, prefix, after string, limit int) ([]Info, error)
}

// ValidateList checks the arguments of Lister.List. Errors wrap ErrInvalid.
func ValidateList(prefix, after string, limit int) error {
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d out of range [1, %d]", ErrInvalid, limit, MaxListLimit)
	}
	if len(prefix) > MaxKeyLen || len(after) > MaxKeyLen {
		return fmt.Errorf("%w: list prefix or start longer than %d bytes", ErrInvalid, MaxKeyLen)
	}
	return nil
}
