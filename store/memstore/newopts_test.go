package memstore_test

import (
	"errors"
	"github.com/tenurekit/tenure"
	"math"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/memstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		o    *memstore.Options
	}{
		{"negative LimitKeys", &memstore.Options{LimitKeys: -1}},
		{"most negative LimitKeys", &memstore.Options{LimitKeys: math.MinInt}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := memstore.New(c.o)
			if s != nil || !errors.Is(err, tenure.ErrInvalid) {
				t.Fatalf("New(%+v) = %v, %v; want nil and an error wrapping tenure.ErrInvalid", c.o, s, err)
			}
		})
	}
	for _, c := range []struct {
		name string
		o    *memstore.Options
	}{{"nil", nil}, {"zero", &memstore.Options{}}} {
		t.Run(c.name, func(t *testing.T) {
			s, err := memstore.New(c.o)
			if err != nil {
				t.Fatal(err)
			}
			g, err := s.Leases().Acquire(t.Context(), "k", lease.NewToken(), time.Minute)
			if err != nil || g.Fence == 0 {
				t.Fatalf("Acquire = %+v, %v", g, err)
			}
			l, err := ratelimit.New(s.Limits(), ratelimit.GCRA, ratelimit.Limit{Rate: 1, Period: time.Minute}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := l.Allow(t.Context(), "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v", d, err)
			}
		})
	}
}
