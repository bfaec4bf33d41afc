package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// views are the store views a test writes state through, as a service
// would, before the commands read it.
type views struct {
	leases    lease.Store
	idem      idempotency.Store
	sessions  session.Store
	limits    ratelimit.Store
	schedules schedule.Store
}

// opsTarget is one store and the flags that name it.
type opsTarget struct {
	name  string
	flags []string
	v     views
}

func opsTargets(t *testing.T) []opsTarget {
	dir := t.TempDir()
	sq, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "tenure.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })

	pg := testenv.Postgres(t)
	pool, err := pgxpool.New(t.Context(), pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pst := newPG(t, pool, nil)
	if err := pst.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}

	rd := testenv.Redis(t, nil)
	rst := newRedis(t, redisClient(t, rd.Addr()), nil)

	return []opsTarget{
		{"embedded", []string{"--data-dir", dir}, views{sq.Leases(), sq.Idempotency(), sq.Sessions(), sq.Limits(), sq.Schedules()}},
		{"postgres", []string{"--store", pg.DSN("postgres")}, views{pst.Leases(), pst.Idempotency(), pst.Sessions(), pst.Limits(), pst.Schedules()}},
		{"redis", []string{"--store", "redis://" + rd.Addr()}, views{rst.Leases(), rst.Idempotency(), rst.Sessions(), rst.Limits(), rst.Schedules()}},
	}
}

// runJSON runs a command with --json and decodes its output into v; it
// returns the exit status.
func runJSON(t *testing.T, v any, args ...string) int {
	t.Helper()
	out, err := run(append(args, "--json")...)
	code := 0
	var e exitErr
	switch {
	case errors.As(err, &e):
		code = e.code
	case err != nil:
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	if v != nil && code == 0 {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: not JSON (%v):\n%s", args, err, out)
		}
	}
	return code
}

func TestOpsCommands(t *testing.T) {
	for _, tg := range opsTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			cmd := func(args ...string) []string { return append(args, tg.flags...) }

			// lease inspect: a held key with its fence and TTL; a free key.
			lk, err := lease.New(tg.v.leases, nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := lk.TryAcquire(ctx, "report:daily", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var info struct {
				Key    string `json:"key"`
				Held   bool   `json:"held"`
				Fence  uint64 `json:"fence"`
				TTL    string `json:"ttl"`
				Holder string `json:"holder"`
			}
			if code := runJSON(t, &info, cmd("lease", "inspect", "report:daily")...); code != 0 || !info.Held || info.Fence != l.Fence() || info.TTL == "" {
				t.Fatalf("lease inspect of a held key: exit %d %+v, want held with fence %d", code, info, l.Fence())
			}
			// Every store keeps the Locker's default holder description.
			if info.Holder != lk.Holder() || info.Holder == "" {
				t.Fatalf("lease inspect of a held key: holder %q, want %q", info.Holder, lk.Holder())
			}
			info.Holder = ""
			l.Release(ctx)
			// The last fence, or, from a store that keeps nothing of an
			// ended lease, exit status 1 (no record of the key).
			code := runJSON(t, &info, cmd("lease", "inspect", "report:daily")...)
			if info.Held || info.Holder != "" || !(code == 0 && info.Fence == l.Fence() || code == 1 && info.Fence == 0) {
				t.Fatalf("lease inspect after release: exit %d %+v", code, info)
			}
			out, err := run(cmd("lease", "inspect", "report:daily")...)
			if code == 0 && (err != nil || !strings.Contains(out, "report:daily") || !strings.Contains(out, "false")) {
				t.Fatalf("lease inspect table (%v):\n%s", err, out)
			}

			// session list and revoke-user: never a token.
			m, err := session.New(tg.v.sessions, nil)
			if err != nil {
				t.Fatal(err)
			}
			tok1, _, err := m.Create(ctx, "alice", map[string]string{"cart": "secret-cart"})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := m.Create(ctx, "alice", nil); err != nil {
				t.Fatal(err)
			}
			out, err = run(cmd("session", "list", "alice", "--json")...)
			if err != nil || strings.Contains(out, tok1.Reveal()) || strings.Contains(out, "secret-cart") {
				t.Fatalf("session list (%v) reveals a token or a value:\n%s", err, out)
			}
			var list []map[string]any
			if code := runJSON(t, &list, cmd("session", "list", "alice")...); code != 0 || len(list) != 2 || list[0]["user_id"] != "alice" {
				t.Fatalf("session list: exit %d %v", code, list)
			}
			var revoked struct{ Revoked int }
			if code := runJSON(t, &revoked, cmd("session", "revoke-user", "alice")...); code != 0 || revoked.Revoked != 2 {
				t.Fatalf("revoke-user: exit %d %+v, want 2", code, revoked)
			}
			if recs, err := tg.v.sessions.List(ctx, "alice"); err != nil || len(recs) != 0 {
				t.Fatalf("after revoke-user the store lists %d sessions (%v)", len(recs), err)
			}
			if _, err := m.Load(ctx, tok1); !errors.Is(err, session.ErrNotFound) {
				t.Fatalf("a revoked session loads: %v", err)
			}

			// schedule history: a done and a failed slot, newest last.
			sch, err := schedule.New(tg.v.schedules, &schedule.Options{Node: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Add(schedule.Job{Name: "settle", Schedule: schedule.Every(time.Second), Run: func(context.Context, *schedule.Slot) error { return nil }}); err != nil {
				t.Fatal(err)
			}
			now, err := tg.v.schedules.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			at := now.Truncate(time.Second).Add(-2 * time.Second)
			for i, runErr := range []error{nil, errors.New("ledger locked")} {
				slot, err := sch.Claim(ctx, "settle", at.Add(time.Duration(i)*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sch.Finish(ctx, slot, runErr); err != nil {
					t.Fatal(err)
				}
			}
			var hist []struct {
				State, Node, Error string
				Attempts           int
				Fence              uint64
				History            []struct {
					Node, Outcome, Error, Started, Finished string
					Fence                                   uint64
				}
			}
			if code := runJSON(t, &hist, cmd("schedule", "history", "settle", "--since", "1h")...); code != 0 || len(hist) != 2 ||
				hist[0].State != "done" || hist[1].State != "failed" || hist[1].Error != "ledger locked" || hist[0].Node != "node-a" || hist[0].Fence == 0 {
				t.Fatalf("schedule history: exit %d %+v", code, hist)
			}
			for i, want := range []struct{ outcome, err string }{{"done", ""}, {"failed", "ledger locked"}} {
				h := hist[i].History
				if len(h) != 1 || h[0].Outcome != want.outcome || h[0].Error != want.err || h[0].Node != "node-a" ||
					h[0].Fence != hist[i].Fence || h[0].Started == "" || h[0].Finished == "" {
					t.Fatalf("schedule history --json: slot %d's attempts %+v, want one %s attempt", i, h, want.outcome)
				}
			}
			out, err = run(cmd("schedule", "history", "settle", "--since", "1h")...)
			if err != nil || !strings.Contains(out, "attempt 1") || !strings.Contains(out, "definition ") ||
				strings.Count(out, "node-a") < 4 || !strings.Contains(out, "ledger locked") {
				t.Fatalf("schedule history: %v\n%s", err, out)
			}

			// limit show: peeks without consuming.
			lim, err := ratelimit.New(tg.v.limits, ratelimit.GCRA, ratelimit.Limit{Name: "api", Rate: 10, Period: time.Minute}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := lim.Allow(ctx, "user:42"); err != nil {
					t.Fatal(err)
				}
			}
			var d struct {
				Allowed   bool
				Remaining int
			}
			for range 2 {
				if code := runJSON(t, &d, cmd("limit", "show", "api", "user:42", "--rate", "10", "--period", "1m")...); code != 0 || !d.Allowed || d.Remaining != 7 {
					t.Fatalf("limit show: exit %d %+v, want allowed with 7 of 10 remaining (3 used, nothing consumed by the peek)", code, d)
				}
			}

			// idempotency show: a completed record; a missing one exits 1.
			k, err := idempotency.New(tg.v.idem, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.Do(ctx, idempotency.Request{Scope: "user:42 POST /charges", Key: "pay-1", Fingerprint: "f"},
				func(context.Context, *idempotency.Claim) ([]byte, error) { return []byte("charged"), nil }); err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Completed  bool
				ValueBytes int `json:"value_bytes"`
			}
			if code := runJSON(t, &rec, cmd("idempotency", "show", "user:42 POST /charges", "pay-1")...); code != 0 || !rec.Completed || rec.ValueBytes != 7 {
				t.Fatalf("idempotency show: exit %d %+v", code, rec)
			}
			if code := runJSON(t, nil, cmd("idempotency", "show", "user:42 POST /charges", "pay-2")...); code != 1 {
				t.Fatalf("idempotency show of a missing key: exit %d, want 1", code)
			}
		})
	}
}

func TestOpsLeaseOnEtcd(t *testing.T) {
	e := testenv.Etcd(t)
	es := newEtcd(t, etcdClient(t, e), nil)
	lk, err := lease.New(es.Leases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(t.Context(), "jobs/nightly", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	store := "etcd://" + strings.TrimPrefix(e.Endpoints()[0], "http://")
	var info struct {
		Held  bool
		Fence uint64
	}
	if code := runJSON(t, &info, "lease", "inspect", "jobs/nightly", "--store", store); code != 0 || !info.Held || info.Fence != l.Fence() {
		t.Fatalf("lease inspect on etcd: exit %d %+v", code, info)
	}
	if code := runJSON(t, nil, "session", "list", "alice", "--store", store); code != 2 {
		t.Fatalf("sessions on etcd: exit %d, want 2 (not kept there)", code)
	}
}

func TestOpsBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"lease", "inspect", "k", "--data-dir", dir},                        // no data file: nothing is created
		{"lease", "inspect", "", "--store", "memory"},                       // empty key
		{"lease", "inspect", "k", "--store", "mysql://u:hunter2@db/x"},      // unknown store
		{"schedule", "history", "j", "--since", "-1h", "--store", "memory"}, // bad duration
		{"limit", "show", "api", "k", "--store", "memory"},                  // no --rate/--period
		{"limit", "show", "api", "k", "--rate", "1", "--period", "1m", "--algorithm", "leaky", "--store", "memory"},
		{"session", "list", "--store", "memory"}, // no user
	} {
		out, err := run(args...)
		if err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("%v printed the password:\n%s", args, out)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
		t.Fatalf("a read command created %v", matches)
	}
}
