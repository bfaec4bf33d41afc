package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// tenure lease list and inspect show who holds a key, on the stores that
// list (SQLite, PostgreSQL, Redis, etcd), against real servers.
func TestLeaseListAndHolder(t *testing.T) {
	dir := t.TempDir()
	sq, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "tenure.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	pg := testenv.SharedPostgres(t)
	dsn := pg.NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pst := newPG(t, pool, nil)
	if err := pst.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	et := testenv.Etcd(t)
	est := newEtcd(t, etcdClient(t, et), nil)
	rd := testenv.Redis(t, nil)
	rst := newRedis(t, redisClient(t, rd.Addr()), nil)
	for _, tg := range []struct {
		name  string
		flags []string
		s     lease.Store
	}{
		{"embedded", []string{"--data-dir", dir}, sq.Leases()},
		{"postgres", []string{"--store", dsn}, pst.Leases()},
		{"etcd", []string{"--store", "etcd://" + et.Endpoints()[0][len("http://"):]}, est.Leases()},
		{"redis", []string{"--store", "redis://" + rd.Addr()}, rst.Leases()},
	} {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			cmd := func(args ...string) []string { return append(args, tg.flags...) }
			lk, err := lease.New(tg.s, &lease.Options{Holder: "billing-7 nightly export"})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"orders/1", "orders/2", "orders/3"} {
				l, err := lk.TryAcquire(ctx, k, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if k == "orders/2" {
					l.Release(ctx)
				} else {
					defer l.Release(ctx)
				}
			}
			var infos []struct {
				Key    string `json:"key"`
				Held   bool   `json:"held"`
				Fence  uint64 `json:"fence"`
				Holder string `json:"holder"`
			}
			// By default only held keys: orders/2 was released.
			if code := runJSON(t, &infos, cmd("lease", "list", "orders/")...); code != 0 || len(infos) != 2 ||
				infos[0].Key != "orders/1" || infos[1].Key != "orders/3" || !infos[0].Held || !infos[1].Held {
				t.Fatalf("lease list (held): exit %d, %+v", code, infos)
			}
			if code := runJSON(t, &infos, cmd("lease", "list", "--prefix", "orders/", "--limit", "1")...); code != 0 || len(infos) != 1 || infos[0].Key != "orders/1" {
				t.Fatalf("lease list --prefix --limit 1: exit %d, %+v", code, infos)
			}
			infos = nil // decode afresh: a free key has no holder member
			if code := runJSON(t, &infos, cmd("lease", "list", "--all", "orders/", "--limit", "2")...); code != 0 || len(infos) != 2 {
				t.Fatalf("lease list --all: exit %d, %+v", code, infos)
			}
			// etcd keeps nothing of an ended lease; the others keep its
			// record (with its last fence) until they reclaim it.
			keepsEnded := tg.name != "etcd"
			second := "orders/2"
			if !keepsEnded {
				second = "orders/3"
			}
			if infos[0].Key != "orders/1" || !infos[0].Held || infos[0].Holder != "billing-7 nightly export" ||
				infos[1].Key != second || infos[1].Held == keepsEnded || infos[1].Fence == 0 ||
				keepsEnded && infos[1].Holder != "" {
				t.Fatalf("lease list --all page: %+v", infos)
			}
			if code := runJSON(t, &infos, cmd("lease", "list", "--all", "orders/", "--after", "orders/2")...); code != 0 || len(infos) != 1 || infos[0].Key != "orders/3" {
				t.Fatalf("lease list --all second page: exit %d, %+v", code, infos)
			}
			out, err := run(cmd("lease", "inspect", "orders/3")...)
			if err != nil || !strings.Contains(out, "HOLDER") || !strings.Contains(out, "billing-7 nightly export") {
				t.Fatalf("lease inspect (%v):\n%s", err, out)
			}
			want := "3 keys, 2 held"
			if !keepsEnded {
				want = "2 keys, 2 held"
			}
			out, err = run(cmd("lease", "list", "--all")...)
			if err != nil || !strings.Contains(out, want) {
				t.Fatalf("lease list --all table (%v):\n%s", err, out)
			}
			out, err = run(cmd("lease", "list")...)
			if err != nil || !strings.Contains(out, "2 held keys") || strings.Contains(out, "orders/2") {
				t.Fatalf("lease list table (%v):\n%s", err, out)
			}
		})
	}
}
