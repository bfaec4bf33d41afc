package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// idemRec is a record as --json prints it.
type idemRec struct {
	Scope      string `json:"scope"`
	Key        string `json:"key"`
	Exists     bool   `json:"exists"`
	Completed  bool   `json:"completed"`
	Fence      uint64 `json:"fence"`
	ClaimTTL   string `json:"claim_ttl"`
	Failed     bool   `json:"failed"`
	Message    string `json:"message"`
	ValueBytes int    `json:"value_bytes"`
}

// TestIdempotencyAdminCommands lists records by state and scope, resolves
// and releases records whose outcome is unknown, and checks the exit
// statuses of refusals and bad input, on SQLite, PostgreSQL and Redis.
func TestIdempotencyAdminCommands(t *testing.T) {
	for _, tg := range opsTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			cmd := func(args ...string) []string { return append(append([]string{"idempotency"}, args...), tg.flags...) }
			prefix := fmt.Sprintf("ops/%d/", time.Now().UnixNano())
			id := func(key string) idempotency.ID { return idempotency.ID{Scope: prefix + "POST /charges", Key: key} }
			s := tg.v.idem
			k, err := idempotency.New(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			fn := func(context.Context, *idempotency.Claim) ([]byte, error) {
				runs++
				return []byte("ran"), nil
			}
			req := func(key string) idempotency.Request {
				return idempotency.Request{Scope: id(key).Scope, Key: key, Fingerprint: "f"}
			}
			begin := func(key string, ttl time.Duration) uint64 {
				b, err := s.Begin(ctx, driver.Begin{ID: id(key), Fingerprint: "f", Token: idempotency.NewToken(), ClaimTTL: ttl, Retention: time.Hour})
				if err != nil || b.State != driver.Claimed {
					t.Fatalf("Begin %s: %+v %v", key, b, err)
				}
				return b.Fence
			}
			if _, err := k.Do(ctx, req("done"), fn); err != nil {
				t.Fatal(err)
			}
			liveFence := begin("live", time.Minute)
			lostFence, lost2Fence := begin("lost", 50*time.Millisecond), begin("lost-2", 50*time.Millisecond)
			deadline := time.Now().Add(10 * time.Second)
			for {
				r, err := s.Inspect(ctx, id("lost-2"))
				if err != nil {
					t.Fatal(err)
				}
				if r.State() == idempotency.StateUnknown {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the claims did not expire")
				}
				time.Sleep(10 * time.Millisecond)
			}

			// list: by state and scope prefix.
			keys := func(args ...string) []string {
				t.Helper()
				var recs []idemRec
				if code := runJSON(t, &recs, cmd(append([]string{"list", "--scope", prefix}, args...)...)...); code != 0 {
					t.Fatalf("list %v: exit %d", args, code)
				}
				var out []string
				for _, r := range recs {
					out = append(out, r.Key)
				}
				return out
			}
			for _, c := range []struct {
				args []string
				want string
			}{
				{nil, "done live lost lost-2"},
				{[]string{"--state", "unknown"}, "lost lost-2"},
				{[]string{"--state", "in-progress"}, "live"},
				{[]string{"--state", "done"}, "done"},
			} {
				if got := strings.Join(keys(c.args...), " "); got != c.want {
					t.Fatalf("list %v = %q, want %q", c.args, got, c.want)
				}
			}
			// SQL stores list in order; Redis lists the first it finds.
			if got := keys("--limit", "1"); len(got) != 1 || (tg.name != "redis" && got[0] != "done") {
				t.Fatalf("list --limit 1 = %v", got)
			}
			out, err := run(cmd("list", "--scope", prefix, "--state", "unknown")...)
			if err != nil || !strings.Contains(out, "SCOPE") || !strings.Contains(out, "lost-2") || !strings.Contains(out, "unknown") ||
				!strings.Contains(out, strconv.FormatUint(lostFence, 10)) || !strings.Contains(out, "2 records") {
				t.Fatalf("list table: %v\n%s", err, out)
			}
			for _, bad := range [][]string{{"--state", "bogus"}, {"--limit", "0"}, {"--limit", "-3"}} {
				if code := runJSON(t, nil, cmd(append([]string{"list"}, bad...)...)...); code != 2 {
					t.Fatalf("list %v: exit %d, want 2", bad, code)
				}
			}

			// resolve: a stale fence is refused (1) and changes nothing;
			// the right one records the result, which Do replays.
			scope := id("lost").Scope
			fence := strconv.FormatUint(lostFence, 10)
			if code := runJSON(t, nil, cmd("resolve", scope, "lost", "--fence", strconv.FormatUint(lostFence+1, 10), "--value", "x")...); code != 1 {
				t.Fatalf("resolve with a moved fence: exit %d, want 1", code)
			}
			for _, bad := range [][]string{
				{"resolve", scope, "lost", "--fence", fence},                                 // no value
				{"resolve", scope, "lost", "--fence", fence, "--value", "a", "--error", "b"}, // two
				{"resolve", scope, "lost", "--fence", "0", "--value", "a"},
				{"resolve", scope, "lost", "--fence", fence, "--value-file", filepath.Join(t.TempDir(), "missing")},
				{"resolve", scope, "lost", "--fence", fence, "--value", "a", "--retention", "-1s"},
				{"release", "", "lost", "--fence", fence},
			} {
				if code := runJSON(t, nil, cmd(bad...)...); code != 2 {
					t.Fatalf("%v: exit %d, want 2", bad, code)
				}
			}
			if r, _ := s.Inspect(ctx, id("lost")); r.State() != idempotency.StateUnknown || r.Fence != lostFence {
				t.Fatalf("record after refusals: %+v", r)
			}
			file := filepath.Join(t.TempDir(), "value")
			if err := os.WriteFile(file, []byte("reconciled"), 0o600); err != nil {
				t.Fatal(err)
			}
			var rec idemRec
			if code := runJSON(t, &rec, cmd("resolve", scope, "lost", "--fence", fence, "--value-file", file)...); code != 0 || !rec.Completed || rec.ValueBytes != 10 {
				t.Fatalf("resolve: exit %d %+v", code, rec)
			}
			if res, err := k.Do(ctx, req("lost"), fn); err != nil || !res.Replayed || string(res.Value) != "reconciled" {
				t.Fatalf("Do after resolve: %+v %v", res, err)
			}
			if code := runJSON(t, nil, cmd("resolve", scope, "lost", "--fence", fence, "--value", "again")...); code != 1 {
				t.Fatalf("resolving a completed record: exit %d, want 1", code)
			}
			if code := runJSON(t, nil, cmd("resolve", scope, "missing", "--fence", fence, "--value", "x")...); code != 1 {
				t.Fatalf("resolving a missing record: exit %d, want 1", code)
			}

			// resolve --error: replayed as a final error.
			if out, err := run(cmd("resolve", scope, "lost-2", "--fence", strconv.FormatUint(lost2Fence, 10), "--error", "card declined")...); err != nil ||
				!strings.Contains(out, "resolved") {
				t.Fatalf("resolve --error: %v\n%s", err, out)
			}
			var fe *idempotency.FinalError
			if _, err := k.Do(ctx, req("lost-2"), fn); !errors.As(err, &fe) || err.Error() != "card declined" {
				t.Fatalf("Do after resolve --error: %v", err)
			}

			// release: a live claim is refused without --force.
			lf := strconv.FormatUint(liveFence, 10)
			if code := runJSON(t, nil, cmd("release", scope, "live", "--fence", lf)...); code != 1 {
				t.Fatalf("release of a live claim: exit %d, want 1", code)
			}
			if code := runJSON(t, &rec, cmd("release", scope, "live", "--fence", lf, "--force")...); code != 0 || rec.Exists {
				t.Fatalf("release --force: exit %d %+v", code, rec)
			}
			if res, err := k.Do(ctx, req("live"), fn); err != nil || res.Replayed || runs != 2 {
				t.Fatalf("Do after release: %+v %v (runs %d), want a run", res, err, runs)
			}
			if code := runJSON(t, nil, cmd("release", scope, "live", "--fence", lf)...); code != 1 {
				t.Fatalf("release with the old fence: exit %d, want 1", code)
			}
		})
	}
	// A store that cannot be reached: 2.
	if code := runJSON(t, nil, "idempotency", "list", "--store", "redis://127.0.0.1:1", "--timeout", "2s"); code != 2 {
		t.Fatalf("list on an unreachable store: exit %d, want 2", code)
	}
}
