package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
)

// TestRemote: a lease made from another process's key, token and fence is
// checked by the store's holder guard like the lease the Locker made, and
// this process can neither renew nor release it nor print its token.
func TestRemote(t *testing.T) {
	ctx := context.Background()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := lease.New(s.Leases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lk.TryAcquire(ctx, "jobs/report", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := held.Token().Reveal()
	r := lease.Remote("jobs/report", tenure.TokenOf(tok), held.Fence())
	if r.Key() != "jobs/report" || r.Fence() != held.Fence() || r.Token().Reveal() != tok {
		t.Fatalf("Remote kept %q, fence %d", r.Key(), r.Fence())
	}
	if err := s.HolderSet(ctx, r, "jobs/report", []byte("v1")); err != nil {
		t.Fatalf("the holder's write through its remote lease: %v", err)
	}
	forged := lease.Remote("jobs/report", tenure.TokenOf("forged"), held.Fence())
	if err := s.HolderSet(ctx, forged, "jobs/report", []byte("forged")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a forged token: %v, want lease.ErrNotHeld", err)
	}
	if v, _, _ := s.FencedGet(ctx, "jobs/report"); string(v) != "v1" {
		t.Fatalf("value %q after the forged write", v)
	}
	if err := r.Renew(ctx); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Renew: %v, want lease.ErrInvalid", err)
	}
	if err := r.Release(ctx); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Release: %v, want lease.ErrInvalid", err)
	}
	if info, _ := s.Leases().Inspect(ctx, "jobs/report"); !info.Held {
		t.Error("Release of the remote lease ended the tenure")
	}
	select {
	case <-r.Done():
	default:
		t.Error("Done is not closed")
	}
	if !errors.Is(r.Err(), lease.ErrNotHeld) || !r.ValidUntil().IsZero() {
		t.Errorf("Err %v, ValidUntil %v", r.Err(), r.ValidUntil())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v %+v %s %#v", r, r, r, r)
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "lease", r)
	if strings.Contains(b.String(), tok) {
		t.Errorf("the token was printed: %s", b.String())
	}
}
