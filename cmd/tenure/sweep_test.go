package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// tenure sweep deletes ended lease rows in bounded passes and keeps held
// ones.
func TestSweepCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenure.db")
	s, err := sqlitestore.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for i := range 25 {
		tok := lease.NewToken()
		k := fmt.Sprintf("order/%d", i)
		if _, err := s.Leases().Acquire(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Leases().Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Leases().Acquire(ctx, "order/held", lease.NewToken(), time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	var out struct {
		Passes  int            `json:"passes"`
		Deleted map[string]int `json:"deleted"`
		More    bool           `json:"more"`
	}
	if code := runJSON(t, &out, "sweep", "--data-dir", dir, "--fence-retention", "1ms", "--limit", "10", "--max", "2"); code != 0 || out.Deleted["leases"] != 20 || !out.More {
		t.Fatalf("sweep --max 2: exit %d %+v, want 20 deleted and more left", code, out)
	}
	if code := runJSON(t, &out, "sweep", "--data-dir", dir, "--fence-retention", "1ms", "--limit", "10"); code != 0 || out.Deleted["leases"] != 5 || out.More {
		t.Fatalf("sweep: exit %d %+v, want the last 5", code, out)
	}
	if info, err := s.Leases().Inspect(ctx, "order/held"); err != nil || !info.Held {
		t.Fatalf("held key after sweep: %+v, %v", info, err)
	}
	if code := runJSON(t, nil, "sweep", "--data-dir", dir, "--limit", "-1"); code != 2 {
		t.Fatalf("bad --limit: exit %d, want 2", code)
	}
}
