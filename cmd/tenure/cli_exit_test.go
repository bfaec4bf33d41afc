package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/lease"
	schedriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// exitCode runs a command and returns its exit status and output.
func exitCode(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := run(args...)
	var e exitErr
	switch {
	case err == nil:
		return 0, out
	case errors.As(err, &e):
		return e.code, out + e.Error()
	}
	// cobra's own errors (unknown flags, wrong argument counts) are bad
	// input.
	return 2, out + err.Error()
}

// TestOperatorExitCodes: 0 for what exists, 1 for what does not, 2 for bad
// input, on the embedded file; and the lease list filters.
func TestOperatorExitCodes(t *testing.T) {
	dir := t.TempDir()
	sq, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "tenure.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	ctx := t.Context()
	lk, err := lease.New(sq.Leases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "jobs/export", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	// A scheduler's slot claim: hidden from lease list unless asked for.
	claim := schedriver.ClaimKey("nightly", "2026-01-01T00:00:00Z")
	if _, err := sq.Leases().Acquire(ctx, claim, "claim-token-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	done, err := sq.Idempotency().Begin(ctx, idemdriver.Begin{ID: idempotency.ID{Scope: "payments", Key: "order-1"},
		Fingerprint: "f", Token: secret.New("claim-token-0123456789"), ClaimTTL: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Idempotency().Complete(ctx, idempotency.ID{Scope: "payments", Key: "order-1"}, "claim-token-0123456789", done.Fence,
		idempotency.Outcome{Value: []byte("receipt-1")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	d := []string{"--data-dir", dir}
	with := func(args ...string) []string { return append(args, d...) }

	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{with("lease", "inspect", "jobs/export"), 0, "held with fence"},
		{with("lease", "inspect", "nope"), 1, `no lease of key "nope"`},
		{with("lease", "inspect", ""), 2, ""},
		{with("lease", "list"), 0, "1 held keys"},
		{with("lease", "list", "--prefix", "jobs/"), 0, "jobs/export"},
		{with("lease", "list", "--prefix", "jobs/", "other/"), 2, "give the key prefix once"},
		{with("lease", "list", "--all"), 0, claim},
		{with("lease", "list", "schedule/"), 0, claim},
		{with("lease", "list", "--limit", "0"), 2, ""},
		{with("schedule", "history", "nosuchjob"), 1, `no job "nosuchjob"`},
		{with("schedule", "history", "nightly", "--since", "0s"), 2, "--since must be positive"},
		{with("idempotency", "show", "payments", "order-1"), 0, "done (9 bytes recorded)"},
		{with("idempotency", "list", "--scope", "payments"), 0, "done (9 bytes recorded)"},
		{with("idempotency", "show", "payments", "nope"), 1, "no record"},
		{with("limit", "show", "api", "user-1", "--rate", "30", "--burst", "10", "--period", "1m"), 0, "10 of 10"},
		{with("limit", "show", "api", "user-1", "--rate", "30", "--period", "1m", "--algorithm", "fixed-window"), 0, "30 of 30"},
		{with("limit", "show", "api", "user-1", "--rate", "30", "--period", "1m", "--algorithm", "nope"), 2, ""},
		{with("session", "list", "alice", "--prefix", "x"), 2, "unknown flag: --prefix"},
		{with("session", "list", "alice"), 0, ""},
		{[]string{"lease", "list", "--store", "nosuch://x"}, 2, ""},
	} {
		code, out := exitCode(t, c.args...)
		if code != c.code || !strings.Contains(out, c.has) {
			t.Errorf("tenure %s: exit %d, want %d with %q:\n%s", strings.Join(c.args, " "), code, c.code, c.has, out)
		}
	}
	// The table names the algorithm and says where the capacity comes from.
	if _, out := exitCode(t, with("limit", "show", "api", "user-1", "--rate", "30", "--burst", "10", "--period", "1m")...); !strings.Contains(out, "gcra") || !strings.Contains(out, "capacity 10: a bucket of 10 (burst), refilled at 30 per 1m0s") {
		t.Errorf("limit show:\n%s", out)
	}
	// The scheduler's claim is not listed by default.
	if _, out := exitCode(t, with("lease", "list")...); strings.Contains(out, "schedule/") {
		t.Errorf("lease list shows a scheduler key:\n%s", out)
	}
}
