package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/tenurekit/tenure/cmd/tenure/internal/doctor"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// doctorJSON runs `tenure doctor --json` and decodes its report.
func doctorJSON(t *testing.T, args ...string) (doctor.Report, bool, int) {
	t.Helper()
	out, err := run(append([]string{"doctor", "--json"}, args...)...)
	var rep struct {
		doctor.Report
		Unsafe bool   `json:"unsafe"`
		Error  string `json:"error"`
	}
	if jerr := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); jerr != nil {
		t.Fatalf("doctor %v: output is not JSON (%v):\n%s", args, jerr, out)
	}
	code := 0
	var e exitErr
	if errors.As(err, &e) {
		code = e.code
	} else if err != nil {
		t.Fatalf("doctor %v: %v", args, err)
	}
	return rep.Report, rep.Unsafe, code
}

func finding(r doctor.Report, check string) doctor.Finding {
	for _, f := range r.Findings {
		if strings.HasSuffix(f.Check, check) {
			return f
		}
	}
	return doctor.Finding{}
}

func TestDoctorRedis(t *testing.T) {
	evicting := testenv.Redis(t, &testenv.RedisOptions{MaxMemory: "64mb", MaxMemoryPolicy: "allkeys-lru"})
	rep, unsafe, code := doctorJSON(t, "--store", "redis://"+evicting.Addr())
	if f := finding(rep, "maxmemory-policy"); f.Status != doctor.Unsafe || !strings.Contains(f.Detail, "allkeys-lru") || f.Fix == "" {
		t.Fatalf("evicting server: maxmemory-policy finding %+v", f)
	}
	if !unsafe || code != 1 {
		t.Fatalf("evicting server: unsafe=%v exit %d, want true and 1", unsafe, code)
	}
	if f := finding(rep, "persistence"); f.Status != doctor.Warn {
		t.Fatalf("server without persistence: %+v, want a warning", f)
	}

	good := testenv.Redis(t, &testenv.RedisOptions{Persist: true})
	rep, unsafe, code = doctorJSON(t, "--store", "redis://"+good.Addr())
	if unsafe || code != 0 {
		t.Fatalf("noeviction server: unsafe=%v exit %d, want false and 0: %+v", unsafe, code, rep)
	}
	for check, want := range map[string]doctor.Status{"maxmemory-policy": doctor.OK, "persistence": doctor.OK, "clock offset": doctor.OK, "release path": doctor.Info} {
		if f := finding(rep, check); f.Status != want {
			t.Errorf("%s: %+v, want %s", check, f, want)
		}
	}
	// The human report says what to fix.
	out, err := run("doctor", "--store", "redis://"+evicting.Addr())
	if err == nil || !strings.Contains(out, "UNSAFE  maxmemory-policy") || !strings.Contains(out, "fix: CONFIG SET maxmemory-policy noeviction") {
		t.Fatalf("human report (err %v):\n%s", err, out)
	}
}

// doctor reports a primary's replicas, min-replicas-to-write and whether
// writes are confirmed there, and a replica as a replica.
func TestDoctorRedisReplicas(t *testing.T) {
	alone := testenv.Redis(t, nil)
	rep, _, _ := doctorJSON(t, "--store", "redis://"+alone.Addr())
	if f := finding(rep, "replicas"); f.Status != doctor.Info || !strings.Contains(f.Detail, "none connected") || !strings.Contains(f.Detail, "confirms no write") {
		t.Fatalf("server without replicas: %+v", f)
	}
	if f := finding(rep, "min-replicas-to-write"); f.Status != doctor.Info {
		t.Fatalf("server without replicas: min-replicas-to-write %+v", f)
	}
	if f := finding(rep, "WAITAOF"); f.Status != doctor.Info || f.Detail == "" {
		t.Fatalf("WAITAOF: %+v", f)
	}

	primary := testenv.Redis(t, nil)
	replica := testenv.RedisReplica(t, primary)
	rep, unsafe, code := doctorJSON(t, "--store", "redis://"+primary.Addr())
	if unsafe || code != 0 {
		t.Fatalf("primary with a replica: unsafe=%v exit %d: %+v", unsafe, code, rep)
	}
	if f := finding(rep, "replicas"); f.Status != doctor.OK || !strings.Contains(f.Detail, "1 online") || !strings.Contains(f.Detail, "WAIT 1") {
		t.Fatalf("primary with a replica: %+v", f)
	}
	if f := finding(rep, "min-replicas-to-write"); f.Status != doctor.Warn || !strings.Contains(f.Fix, "min-replicas-to-write 1") {
		t.Fatalf("min-replicas-to-write 0 with a replica: %+v, want a warning", f)
	}
	c := redisClient(t, primary.Addr())
	if err := c.Do(t.Context(), c.B().ConfigSet().ParameterValue().ParameterValue("min-replicas-to-write", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	rep, _, _ = doctorJSON(t, "--store", "redis://"+primary.Addr())
	if f := finding(rep, "min-replicas-to-write"); f.Status != doctor.OK || !strings.HasPrefix(f.Detail, "1:") {
		t.Fatalf("min-replicas-to-write 1: %+v", f)
	}
	rep, _, _ = doctorJSON(t, "--store", "redis://"+replica.Addr())
	if f := finding(rep, "replication"); f.Status != doctor.Info || !strings.Contains(f.Detail, "a replica of "+primary.Addr()) {
		t.Fatalf("replica: %+v", f)
	}
}

func TestDoctorRedisCluster(t *testing.T) {
	c := testenv.RedisCluster(t)
	rep, unsafe, code := doctorJSON(t, "--store", "redis://"+c.Addrs()[0])
	if unsafe || code != 0 {
		t.Fatalf("cluster: unsafe=%v exit %d: %+v", unsafe, code, rep)
	}
	n := 0
	for _, f := range rep.Findings {
		if strings.HasSuffix(f.Check, "cluster state") {
			n++
			if f.Status != doctor.OK {
				t.Errorf("%+v", f)
			}
		}
	}
	if n < 3 {
		t.Fatalf("cluster state checked on %d nodes, want every master: %+v", n, rep)
	}
}

func TestDoctorPostgres(t *testing.T) {
	// The test server runs with fsync and synchronous_commit off (for
	// speed): exactly what doctor must refuse.
	pg := testenv.Postgres(t)
	dsn := pg.DSN("postgres")
	rep, unsafe, code := doctorJSON(t, "--store", dsn)
	if !unsafe || code != 1 || finding(rep, "synchronous_commit").Status != doctor.Unsafe || finding(rep, "fsync").Status != doctor.Unsafe {
		t.Fatalf("server with fsync and synchronous_commit off: unsafe=%v exit %d: %+v", unsafe, code, rep)
	}
	if finding(rep, "version").Status != doctor.OK || finding(rep, "clock offset").Status != doctor.OK {
		t.Fatalf("version or clock: %+v", rep)
	}
	if f := finding(rep, "schema"); f.Status != doctor.Warn {
		t.Fatalf("no tenure tables: %+v, want a warning", f)
	}
	// synchronous_commit on for the role tenure connects as: that finding
	// is fixed, fsync (a server setting) is still unsafe.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `ALTER ROLE postgres SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	defer db.ExecContext(context.Background(), `ALTER ROLE postgres RESET synchronous_commit`)
	rep, unsafe, code = doctorJSON(t, "--store", dsn)
	if f := finding(rep, "synchronous_commit"); f.Status != doctor.OK || !unsafe || code != 1 || finding(rep, "fsync").Status != doctor.Unsafe {
		t.Fatalf("synchronous_commit on, fsync off: %+v unsafe=%v exit %d", f, unsafe, code)
	}
}

// doctor flags asynchronous streaming standbys, passes synchronous ones,
// reports a standby as one, and an UNLOGGED leases table next to standbys.
func TestDoctorPostgresStandbys(t *testing.T) {
	primary := testenv.PostgresWith(t, &testenv.PostgresOptions{Durable: true})
	dsn := primary.DSN("postgres")
	rep, _, _ := doctorJSON(t, "--store", dsn)
	if f := finding(rep, "standbys"); f.Status != doctor.Info || !strings.Contains(f.Detail, "no streaming standby") {
		t.Fatalf("server without standbys: %+v", f)
	}
	standby := testenv.PostgresStandby(t, primary, primary.Addr())
	rep, _, _ = doctorJSON(t, "--store", dsn)
	if f := finding(rep, "standbys"); f.Status != doctor.Warn || !strings.Contains(f.Detail, "1 of 1 streaming standbys are asynchronous") || !strings.Contains(f.Fix, "synchronous_standby_names") {
		t.Fatalf("asynchronous standby: %+v, want a warning", f)
	}
	rep, _, _ = doctorJSON(t, "--store", standby.DSN("postgres"))
	if f := finding(rep, "standbys"); f.Status != doctor.Info || !strings.Contains(f.Detail, "is a standby") {
		t.Fatalf("the standby itself: %+v", f)
	}

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	// An UNLOGGED leases table is not replicated.
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA tenure; CREATE UNLOGGED TABLE tenure.leases (key text)`); err != nil {
		t.Fatal(err)
	}
	rep, _, _ = doctorJSON(t, "--store", dsn)
	if f := finding(rep, "leases table"); f.Status != doctor.Warn || !strings.Contains(f.Detail, "not replicated") {
		t.Fatalf("UNLOGGED leases next to a standby: %+v", f)
	}
	// Commits that wait for the standby.
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby did not become synchronous")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, _, _ = doctorJSON(t, "--store", dsn)
	if f := finding(rep, "standbys"); f.Status != doctor.OK || !strings.Contains(f.Detail, "all synchronous") {
		t.Fatalf("synchronous standby: %+v", f)
	}
}

func TestDoctorEtcd(t *testing.T) {
	e := testenv.Etcd(t)
	rep, unsafe, code := doctorJSON(t, "--store", "etcd://"+strings.TrimPrefix(e.Endpoints()[0], "http://"))
	if unsafe || code != 0 || finding(rep, "leader").Status != doctor.OK {
		t.Fatalf("etcd: unsafe=%v exit %d: %+v", unsafe, code, rep)
	}
	if f := finding(rep, "minimum lease TTL"); f.Status == "" {
		t.Fatalf("no lease TTL finding: %+v", rep)
	}
}

func TestDoctorSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	s, err := sqlitestore.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rep, unsafe, code := doctorJSON(t, "--store", "sqlite:"+path)
	if unsafe || code != 0 || finding(rep, "journal mode").Status != doctor.OK || finding(rep, "busy timeout").Status != doctor.OK || finding(rep, "schema").Status != doctor.OK {
		t.Fatalf("file opened by tenure: unsafe=%v exit %d: %+v", unsafe, code, rep)
	}
	// The report says which tenure checked: the JSON's version member is
	// what tenure version --json prints, the text's first line ends with
	// the short form.
	out, err := run("doctor", "--json", "--store", "sqlite:"+path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var withVersion struct {
		Version *versionInfo `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &withVersion); err != nil || withVersion.Version == nil {
		t.Fatalf("no version member (%v):\n%s", err, out)
	}
	if v, want := *withVersion.Version, currentVersion(); v.Version != want.Version || v.RedisScripts != want.RedisScripts ||
		v.Schema["sqlite"] != want.Schema["sqlite"] || v.Schema["postgres"] != want.Schema["postgres"] {
		t.Errorf("version member %+v, want %+v", v, want)
	}
	out, err = run("doctor", "--store", "sqlite:"+path)
	if first, _, _ := strings.Cut(out, "\n"); err != nil || first != "sqlite at sqlite:"+path+", checked by "+currentVersion().Short() {
		t.Errorf("first line %q (err %v), want the store and %q", first, err, currentVersion().Short())
	}
	// A DSN without a busy timeout is unsafe under concurrent writers.
	rep, unsafe, code = doctorJSON(t, "--store", "sqlite:"+path+"?_pragma=journal_mode(WAL)")
	if f := finding(rep, "busy timeout"); f.Status != doctor.Unsafe || !unsafe || code != 1 {
		t.Fatalf("DSN without busy timeout: %+v unsafe=%v exit %d", f, unsafe, code)
	}
	// A missing file is an error, and doctor does not create it.
	missing := filepath.Join(t.TempDir(), "none.db")
	if _, _, code := doctorJSON(t, "--store", "sqlite:"+missing); code != 2 {
		t.Fatalf("missing file: exit %d, want 2", code)
	}
	if _, err := filepath.Glob(missing); err != nil {
		t.Fatal(err)
	}
	if matches, _ := filepath.Glob(missing + "*"); len(matches) != 0 {
		t.Fatalf("doctor created %v", matches)
	}
}

func TestDoctorBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--store", "mysql://root:hunter2@db/x"},
		{"doctor", "--store", "memory", "--timeout", "0s"},
		{"doctor", "extra"},
	} {
		out, err := run(args...)
		if err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("%v printed the password:\n%s", args, out)
		}
	}
}
