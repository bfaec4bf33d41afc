package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/memstore"
)

// TestRateLimitConformance runs the rate limit suite on memstore, on a
// clock the suite drives (it starts in 2041, far from the real time).
func TestRateLimitConformance(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimittest.Target {
		clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
		ms := newMem(t, &memstore.Options{Clock: clock.Now})
		s, faults := ratelimittest.Wrap(ms.Limits())
		return ratelimittest.Target{
			Store:  s,
			Clock:  clock,
			Faults: faults,
			Keys: func(context.Context) ([]ratelimittest.KeyTTL, error) {
				var ks []ratelimittest.KeyTTL
				for k, ttl := range ms.RateLimitKeys() {
					ks = append(ks, ratelimittest.KeyTTL{Key: k, TTL: ttl})
				}
				return ks, nil
			},
		}
	})
}
