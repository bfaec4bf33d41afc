package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// tenure election list and leader show who leads, on the embedded file
// and on Redis, with exit status 1 when no one leads.
func TestElectionCommands(t *testing.T) {
	dir := t.TempDir()
	sq, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "tenure.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	rd := testenv.Redis(t, nil)
	rst := newRedis(t, redisClient(t, rd.Addr()), nil)
	for _, tg := range []struct {
		name  string
		flags []string
		s     lease.Store
	}{
		{"embedded", []string{"--data-dir", dir}, sq.Leases()},
		{"redis", []string{"--store", "redis://" + rd.Addr()}, rst.Leases()},
	} {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			cmd := func(args ...string) []string { return append(args, tg.flags...) }
			var terms []*election.Term
			for _, n := range []string{"billing", "reports"} {
				e, err := election.New(tg.s, n, &election.Options{Holder: "worker-1 " + n, TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				tm, err := e.Campaign(ctx)
				if err != nil {
					t.Fatal(err)
				}
				terms = append(terms, tm)
			}
			var rows []electionRow
			if code := runJSON(t, &rows, cmd("election", "list")...); code != 0 || len(rows) != 2 ||
				rows[0].Name != "billing" || rows[0].Leader != "worker-1 billing" || rows[0].Fence != terms[0].Fence() || !rows[0].Led ||
				rows[1].Name != "reports" || rows[1].TTL <= 0 {
				t.Fatalf("election list: exit %d, %+v", code, rows)
			}
			var one electionRow
			if code := runJSON(t, &one, cmd("election", "leader", "reports")...); code != 0 || one.Leader != "worker-1 reports" || one.Fence != terms[1].Fence() {
				t.Fatalf("election leader: exit %d, %+v", code, one)
			}
			if err := terms[1].Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if code := runJSON(t, nil, cmd("election", "leader", "reports")...); code != 1 {
				t.Fatalf("election leader of a resigned election: exit %d, want 1", code)
			}
			if code := runJSON(t, nil, cmd("election", "leader", "nosuch")...); code != 1 {
				t.Fatalf("election leader of an unknown election: exit %d, want 1", code)
			}
			if code := runJSON(t, nil, cmd("election", "leader", "bad\x00name")...); code != 2 {
				t.Fatalf("election leader of a bad name: exit %d, want 2", code)
			}
			if code := runJSON(t, &rows, cmd("election", "list")...); code != 0 || len(rows) != 1 || rows[0].Name != "billing" {
				t.Fatalf("election list after a resign: exit %d, %+v", code, rows)
			}
			if code := runJSON(t, &rows, cmd("election", "list", "--all")...); code != 0 || len(rows) != 2 || rows[1].Led || rows[1].Fence != terms[1].Fence() {
				t.Fatalf("election list --all: exit %d, %+v", code, rows)
			}
			out, err := run(cmd("election", "list")...)
			if err != nil || !strings.Contains(out, "worker-1 billing") || !strings.Contains(out, "1 elections, 1 with a leader") {
				t.Fatalf("election list table (%v):\n%s", err, out)
			}
			terms[0].Resign(ctx)
		})
	}
}
