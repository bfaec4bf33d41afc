package driver

import (
	"context"
	"time"
)

// PermitOps gives a store AcquirePermit, RenewPermit and ReleasePermit
// from its one permit operation, Op, which a script or a server function
// carries out atomically: op is "a" (acquire), "r" (renew) or "x"
// (release), and Op returns the grant and whether id held (or got) a
// permit. PermitOps validates the arguments first (ValidatePermit) and
// turns a permit not held into ErrPermitLost. Embed it in the store's rate
// limit view and set Op when the view is made.
type PermitOps struct {
	Op func(ctx context.Context, op string, key StateKey, id string, permits int, ttl time.Duration) (PermitGrant, bool, error)
}

// AcquirePermit is Store.AcquirePermit through Op "a".
func (p PermitOps) AcquirePermit(ctx context.Context, key StateKey, id string, permits int, ttl time.Duration) (PermitGrant, error) {
	if err := ValidatePermit(key, id, permits, ttl); err != nil {
		return PermitGrant{}, err
	}
	g, _, err := p.Op(ctx, "a", key, id, permits, ttl)
	return g, err
}

// RenewPermit is Store.RenewPermit through Op "r".
func (p PermitOps) RenewPermit(ctx context.Context, key StateKey, id string, ttl time.Duration) (PermitGrant, error) {
	if err := ValidatePermit(key, id, -1, ttl); err != nil {
		return PermitGrant{}, err
	}
	g, held, err := p.Op(ctx, "r", key, id, 1, ttl)
	if err != nil {
		return PermitGrant{}, err
	}
	if !held {
		return g, ErrPermitLost
	}
	return g, nil
}

// ReleasePermit is Store.ReleasePermit through Op "x".
func (p PermitOps) ReleasePermit(ctx context.Context, key StateKey, id string) error {
	if err := ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	_, held, err := p.Op(ctx, "x", key, id, 1, 0)
	if err != nil {
		return err
	}
	if !held {
		return ErrPermitLost
	}
	return nil
}
