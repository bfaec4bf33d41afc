package memstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/memstore"
)

// resource adapts the memstore fenced register for the suite; its plain
// writes go to an unguarded map, the negative control.
type resource struct {
	s     *memstore.Store
	mu    sync.Mutex
	plain map[string]string
}

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *resource) PlainWrite(_ context.Context, name, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain[name] = v
	return nil
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	v, ok := r.plain[name]
	r.mu.Unlock()
	if ok {
		return v, nil
	}
	b, _, err := r.s.FencedGet(ctx, name)
	return string(b), err
}

func TestLeaseConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Target {
		ms := newMem(t, nil)
		s, faults := leasetest.Wrap(ms.Leases())
		return leasetest.Target{
			Store:    s,
			Direct:   ms.Leases(),
			Faults:   faults,
			Restart:  func(t *testing.T) lease.Store { return newMem(t, nil).Leases() },
			Resource: &resource{s: ms, plain: map[string]string{}},
		}
	})
}
