package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/store/memstore"
)

func TestFencedSetModes(t *testing.T) {
	ctx := t.Context()
	s := newMem(t, nil)
	if err := s.FencedSet(ctx, "r", 10, []byte("a")); err != nil {
		t.Fatal(err)
	}
	var stale *fence.StaleError
	if err := s.FencedSet(ctx, "r", 10, []byte("b")); !errors.As(err, &stale) || stale.Current != 10 || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("equal fence in strict mode: %v", err)
	}
	if err := s.FencedSetAtLeast(ctx, "r", 10, []byte("c")); err != nil {
		t.Fatalf("equal fence in at-least mode: %v", err)
	}
	if err := s.FencedSetAtLeast(ctx, "r", 9, []byte("d")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older fence in at-least mode: %v", err)
	}
	if v, f, _ := s.FencedGet(ctx, "r"); string(v) != "c" || f != 10 {
		t.Fatalf("stored %q/%d, want c/10", v, f)
	}
	if err := s.FencedSet(ctx, "", 11, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("empty resource: %v", err)
	}
}

// The window a max-fence guard leaves open (it is blind to the TTL): A expired, B holds the key but
// has not written. The max-fence guard still admits A; HolderSet does not.
func TestHolderSetClosesTheTTLBlindWindow(t *testing.T) {
	ctx := t.Context()
	now := time.Unix(1_800_000_000, 0)
	s := newMem(t, &memstore.Options{Clock: func() time.Time { return now }})
	// The Locker measures validity on the real clock; only the store's
	// judgement matters here.
	lk := leasetest.NewLocker(t, s.Leases(), nil)
	a, err := lk.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.HolderSet(ctx, a, "r", []byte("A")); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	now = now.Add(2 * time.Second) // A's lease expires on the store's clock
	b, err := lk.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FencedSet(ctx, "blind", a.Fence(), []byte("A-late")); err != nil {
		t.Fatalf("max-fence guard should still admit A: %v", err)
	}
	if err := s.HolderSet(ctx, a, "r", []byte("A-late")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("expired holder's write: %v, want ErrNotHeld", err)
	}
	if err := s.HolderSet(ctx, b, "r", []byte("B")); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if v, f, _ := s.FencedGet(ctx, "r"); string(v) != "B" || f != b.Fence() {
		t.Fatalf("stored %q/%d", v, f)
	}
}
