package proof_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/proof"
)

func TestMain(m *testing.M) {
	if proof.IsWorker() {
		os.Exit(proof.WorkerMain())
	}
	testenv.Main(m)
}

// options are short runs with workers that re-execute this test binary.
func options(t *testing.T, store string, d time.Duration, workloads ...string) proof.Options {
	return proof.Options{
		Store: store, Workloads: workloads, Duration: d,
		Args: []string{"-test.run=^$"}, Dir: keptDir(t),
	}
}

// keptDir is a directory for a run's files (histories and visualizations
// of failed checks), removed after a test that passed and kept, with its
// path in the log, after one that failed.
func keptDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tenure-proof-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the run's files are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// prove runs o and requires every workload to pass: no violation in the
// guarded run, at least one in the control. A workload whose control
// showed none (the random faults missed), whose nemesis had no time for
// an aimed fault (a busy machine makes fewer grants in a run), or whose
// lease-counter control stayed linearizable, is run again, twice as long
// each time, as is an election run in which no term's end was judged. A
// guarded run whose only violations are of the election's liveness bound
// is run once more, and judged the same way.
func prove(t *testing.T, o proof.Options) []proof.Result {
	t.Helper()
	rs, err := proof.Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var out []proof.Result
	for _, r := range rs {
		// A control can be lucky in a short run: run the workload again,
		// twice as long each time, before calling the run inconclusive.
		short := func() bool {
			// Never a run with a violation: only a pass without an aimed
			// fault, or whose lease-counter control stayed linearizable
			// (its lost increments can still fit a register's history,
			// and its visualization is checked), or an inconclusive run,
			// is run again.
			lucky := r.Workload == "lease-counter" && r.Control.Linearizable != nil && *r.Control.Linearizable
			// An election run too short for any term's end to be judged
			// (ends near the run's end are not) checked no liveness.
			unjudged := r.Workload == "election" && (r.Guarded.Succession == nil || r.Guarded.Succession.Deaths+r.Guarded.Succession.Resignations == 0)
			return r.Verdict == proof.VerdictInconclusive || r.Verdict == proof.VerdictPass && (aims[r.Workload] && aimedFaults(r) == 0 || lucky || unjudged)
		}
		run := func(d time.Duration) proof.Result {
			o2 := o
			o2.Workloads, o2.Duration = []string{r.Workload}, d
			again, err := proof.Run(t.Context(), o2)
			if err != nil {
				t.Fatal(err)
			}
			return again[0]
		}
		for retried := false; ; retried = true {
			for d := 2 * o.Duration; short() && d <= 8*o.Duration; d *= 2 {
				r = run(d)
			}
			// The liveness bound is judged against a machine's speed,
			// which a busy machine can break for one run: a guarded run
			// whose only violations are of that bound is run once more,
			// and that run is judged like the first (run longer while it
			// is inconclusive). A stalled election breaks the bound in
			// every run.
			if retried || !livenessOnly(r) {
				break
			}
			t.Logf("%s on %s: the guarded run broke only the liveness bound (%v); running it again", r.Workload, r.Store, r.Guarded.Violations)
			r = run(o.Duration)
		}
		out = append(out, r)
		check(t, r)
	}
	return out
}

// livenessOnly reports whether r's guarded run has violations and every
// one is of the election's liveness bound.
func livenessOnly(r proof.Result) bool {
	if r.Guarded.Count == 0 || r.Guarded.Count != len(r.Guarded.Violations) {
		return false
	}
	for _, v := range r.Guarded.Violations {
		if !strings.HasPrefix(v, "no new leader within ") {
			return false
		}
	}
	return true
}

func check(t *testing.T, r proof.Result) {
	t.Helper()
	if r.Verdict == proof.VerdictSkipped {
		t.Logf("%s on %s: skipped: %s", r.Workload, r.Store, r.Note)
		return
	}
	t.Logf("%s on %s: %s; guarded acknowledged %d of %d, control acknowledged %d with %d violations; faults %v",
		r.Workload, r.Store, r.Verdict, r.Guarded.Acknowledged, r.Guarded.Attempts, r.Control.Acknowledged, r.Control.Count, r.Faults)
	if r.Guarded.Count != 0 {
		t.Errorf("%s on %s: guarded run has %d violations: %v", r.Workload, r.Store, r.Guarded.Count, r.Guarded.Violations)
	}
	if r.Control.Count == 0 {
		t.Errorf("%s on %s: the control showed no violation (%s)", r.Workload, r.Store, r.Verdict)
	}
	if r.Verdict != proof.VerdictPass {
		t.Errorf("%s on %s: verdict %s (%s%s)", r.Workload, r.Store, r.Verdict, r.Error, r.Note)
	}
	if r.Guarded.Acknowledged == 0 {
		t.Errorf("%s on %s: nothing acknowledged in the guarded run", r.Workload, r.Store)
	}
	if len(r.Faults) == 0 {
		t.Errorf("%s on %s: no fault injected", r.Workload, r.Store)
	}
	if aims[r.Workload] && aimedFaults(r) == 0 {
		t.Errorf("%s on %s: faults %v: no aimed fault", r.Workload, r.Store, r.Faults)
	}
	if r.Workload == "election" {
		// The liveness check must have judged terms' ends, or it
		// checked nothing.
		if s := r.Guarded.Succession; s == nil || s.Deaths+s.Resignations == 0 {
			t.Errorf("election on %s: no term's end was judged (%+v)", r.Store, s)
		} else {
			t.Logf("election on %s: next leader at most %v after a death plus a TTL (%d judged), %v after a resignation (%d judged)",
				r.Store, s.AfterDeath, s.Deaths, s.AfterResignation, s.Resignations)
		}
	}
}

// aimedFaults counts r's faults aimed at a holder (pause-aimed-*,
// proxy-hold-aimed-*).
func aimedFaults(r proof.Result) int {
	n := 0
	for k, v := range r.Faults {
		if strings.Contains(k, "-aimed-") {
			n += v
		}
	}
	return n
}

// aims are the workloads whose nemesis aims at the holders.
var aims = map[string]bool{"lease-counter": true, "election": true, "fenced-register": true}

func TestProofSQLite(t *testing.T) {
	rs := prove(t, options(t, "sqlite:"+filepath.Join(t.TempDir(), "tenure.db"), 3*time.Second))
	if len(rs) != len(proof.Workloads()) {
		t.Fatalf("%d results, want one per workload", len(rs))
	}
	for _, r := range rs {
		if r.Verdict == proof.VerdictSkipped {
			t.Errorf("%s skipped on SQLite", r.Workload)
		}
		if r.Workload == "lease-counter" {
			checkVisualized(t, r)
		}
	}
}

// checkVisualized requires lease-counter's control, whose counter is not
// linearizable, to have its history visualized in a file, and the guarded
// run none.
func checkVisualized(t *testing.T, r proof.Result) {
	t.Helper()
	if r.Control.Linearizable == nil || *r.Control.Linearizable {
		t.Fatalf("%s on %s: control linearizable = %v, want false", r.Workload, r.Store, r.Control.Linearizable)
	}
	if r.Guarded.Linearizable == nil || !*r.Guarded.Linearizable {
		t.Errorf("%s on %s: guarded linearizable = %v, want true", r.Workload, r.Store, r.Guarded.Linearizable)
	}
	found := false
	for _, f := range r.Files {
		if strings.Contains(filepath.Base(f), "-guarded") {
			t.Errorf("a visualization was written for the guarded run: %s", f)
		}
		if !strings.Contains(filepath.Base(f), "-control") || filepath.Ext(f) != ".html" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "write") {
			t.Errorf("%s does not show the writes (%d bytes)", f, len(b))
		}
		found = true
	}
	if !found {
		t.Errorf("no visualization of the control's history among %v", r.Files)
	}
}

func TestProofMemory(t *testing.T) {
	rs := prove(t, options(t, "memory", 3*time.Second))
	for _, r := range rs {
		if !strings.Contains(r.Detail+r.Note, "goroutines") {
			t.Errorf("%s on memory: the report does not say the workers are goroutines: %q", r.Workload, r.Detail)
		}
		if r.Workload == "lease-counter" {
			checkVisualized(t, r)
		}
	}
}

func TestProofPostgres(t *testing.T) {
	dsn := testenv.SharedPostgres(t).NewDatabase(t)
	prove(t, options(t, dsn, 3*time.Second))
}

func TestProofRedis(t *testing.T) {
	prove(t, options(t, "redis://"+testenv.SharedRedis(t).Addr(), 3*time.Second))
}

func TestProofRedisCluster(t *testing.T) {
	c := testenv.SharedRedisCluster(t)
	prove(t, options(t, "redis://"+c.Addrs()[0], 3*time.Second)) // every workload
}

func TestProofEtcd(t *testing.T) {
	eps := testenv.SharedEtcd(t).Endpoints()
	rs := prove(t, options(t, "etcd://"+strings.TrimPrefix(eps[0], "http://"), 8*time.Second))
	for _, r := range rs {
		leases := r.Workload == "lease-counter" || r.Workload == "election" || r.Workload == "fenced-register"
		if !leases && r.Verdict != proof.VerdictSkipped {
			t.Errorf("%s on etcd: %s, want skipped", r.Workload, r.Verdict)
		}
	}
}

// A Redis server without persistence restarted during the lease workload
// forgets its locks, fences and the counter: the counter can lose
// acknowledged increments (the documented limit of a store that loses its
// data), but fences must not go back: every grant requested after another
// was granted has a greater fence.
func TestProofRedisRestartWithoutPersistence(t *testing.T) {
	t.Parallel() // a server of its own; runs beside the other store-fault tests
	srv := testenv.Redis(t, nil)
	// Lost increments are the documented limit of a store that loses its
	// data; fences going back are the failure.
	regressed := func(r proof.Result) bool { return r.Guarded.FenceRegressions > 0 }
	r := untilExercised(t, 4*time.Second, regressed, func(d time.Duration) proof.Options {
		o := options(t, "redis://"+srv.Addr(), d, "lease-counter")
		o.CheckTimeout = 5 * time.Second // the lost locks make the histories hard to check
		o.Faults.Restart = func(context.Context) error {
			srv.Restart(t)
			return nil
		}
		return o
	})
	if r.Faults["store-restart"] != 1 {
		t.Fatalf("faults %v, want one store restart", r.Faults)
	}
	t.Logf("guarded: %+v", r.Guarded)
	if r.Guarded.FenceRegressions != 0 {
		t.Errorf("fences went back after the restart: %v", r.Guarded.Violations)
	}
	if r.Guarded.Acknowledged == 0 || r.Control.Count == 0 {
		t.Errorf("guarded acknowledged %d, control violations %d: the run did not exercise the lease", r.Guarded.Acknowledged, r.Control.Count)
	}
}

// untilExercised runs the one workload of options(d), made afresh for each
// run, until its control shows a violation, its guarded run shows one that
// broken reports (the test's failure) or the run fails, running again
// twice as long each time up to 4x d: on a busy machine a short run's
// random faults may miss the control. Never past a guarded violation.
func untilExercised(t *testing.T, d time.Duration, broken func(r proof.Result) bool, options func(d time.Duration) proof.Options) proof.Result {
	t.Helper()
	for run := d; ; run *= 2 {
		rs, err := proof.Run(t.Context(), options(run))
		if err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		if r.Control.Count > 0 || broken(r) || r.Error != "" || run >= 4*d {
			return r
		}
		t.Logf("%s on %s: the control showed no violation in %v (faults %v); running again for %v", r.Workload, r.Store, run, r.Faults, 2*run)
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, o := range []proof.Options{
		{Workloads: []string{"nope"}},
		{Duration: time.Millisecond},
		{Workers: 1},
		{TTL: time.Millisecond},
		{Store: "ftp://x"},
	} {
		if _, err := proof.Run(t.Context(), o); err == nil || !strings.Contains(err.Error(), "invalid") {
			t.Errorf("Run(%+v) = %v, want an invalid-argument error", o, err)
		}
	}
}

// TestProofLong is the long run documented in docs/proof.md. It runs only
// when TENURE_PROOF_LONG is set to a duration per workload:
//
//	TENURE_PROOF_LONG=45s TENURE_TEST_REQUIRE=1 go test -run TestProofLong -v -timeout 60m ./proof
func TestProofLong(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("TENURE_PROOF_LONG"))
	if err != nil {
		t.Skip("set TENURE_PROOF_LONG to a duration per workload to run the long proof")
	}
	stores := map[string]func(t *testing.T) string{
		"embedded": func(*testing.T) string { return "" },
		"postgres": func(t *testing.T) string { return testenv.SharedPostgres(t).NewDatabase(t) },
		"redis":    func(t *testing.T) string { return "redis://" + testenv.SharedRedis(t).Addr() },
		"etcd": func(t *testing.T) string {
			return "etcd://" + strings.TrimPrefix(testenv.SharedEtcd(t).Endpoints()[0], "http://")
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := options(t, store(t), d)
			o.Progress = os.Stderr
			if name != "etcd" {
				o.TTL = 100 * time.Millisecond
			}
			rs, err := proof.Run(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			proof.WriteText(&b, rs)
			t.Logf("tenure proof on %s, %v per workload:\n%s", name, d, b.String())
			for _, r := range rs {
				if r.Verdict != proof.VerdictSkipped && r.Guarded.Count != 0 {
					t.Errorf("%s on %s: %d violations in the guarded run", r.Workload, r.Store, r.Guarded.Count)
				}
			}
		})
	}
}

// PostgreSQL stopped in immediate mode (no checkpoint; crash recovery on
// the next start) during the lease workload, on a server that syncs every
// commit: nothing acknowledged may be lost, fences must not go back, the
// guard must refuse every stale write and the lease and the counter must
// stay linearizable.
func TestProofPostgresStopImmediate(t *testing.T) {
	t.Parallel() // a server of its own; runs beside the other store-fault tests
	srv := testenv.PostgresWith(t, &testenv.PostgresOptions{Durable: true})
	o := options(t, srv.NewDatabase(t), 4*time.Second, "lease-counter")
	o.Faults.Restart = func(context.Context) error {
		srv.StopImmediate(t)
		time.Sleep(200 * time.Millisecond) // down for a moment, as after a crash
		srv.Start(t)
		return nil
	}
	rs, err := proof.Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	t.Logf("guarded: %+v; control violations %d; faults %v", r.Guarded, r.Control.Count, r.Faults)
	if r.Faults["store-restart"] != 1 {
		t.Fatalf("faults %v, want one store restart", r.Faults)
	}
	if r.Guarded.Count != 0 {
		t.Errorf("guarded run across an immediate stop: %d violations: %v", r.Guarded.Count, r.Guarded.Violations)
	}
	if r.Guarded.Acknowledged == 0 || r.Guarded.Linearizable == nil || !*r.Guarded.Linearizable {
		t.Errorf("guarded acknowledged %d, linearizable %v", r.Guarded.Acknowledged, r.Guarded.Linearizable)
	}
	if r.Error != "" {
		t.Errorf("run error: %s", r.Error)
	}
}

// A Redis primary killed (SIGKILL) and its lagging replica promoted during
// the lease workload, set up as `tenure proof --fault failover` does: the
// replica's replication stream is held back while its link stays up, so
// the promoted replica lacks what the primary wrote since, and the workers
// follow through a relay switched to it. With the store's defaults a write
// is reported done only once the replica confirmed it, so the guarded run
// loses nothing acknowledged: no violation at all (no second holder, no
// lost increment, no older fence), while the control still shows its own.
func TestProofRedisFailover(t *testing.T) {
	t.Parallel() // servers of its own; runs beside the other store-fault tests
	testenv.RequireBinary(t, "redis-server")
	var s *proof.StartedStore
	violated := func(r proof.Result) bool { return r.Guarded.Count > 0 }
	r := untilExercised(t, 4*time.Second, violated, func(d time.Duration) proof.Options {
		if s != nil {
			s.Close() // a failover happens once per primary: a new pair for each run
		}
		var err error
		s, err = proof.StartStoreWith(t.Context(), "redis", proof.StartOptions{Dir: t.TempDir(), Replica: true})
		if err != nil {
			t.Fatal(err)
		}
		o := options(t, s.URL, d, "lease-counter")
		o.Faults.Failover = s.Failover
		return o
	})
	defer s.Close()
	t.Logf("guarded: %+v; control violations %d; faults %v", r.Guarded, r.Control.Count, r.Faults)
	if r.Faults["failover"] != 1 {
		t.Fatalf("faults %v, want one failover", r.Faults)
	}
	if r.Guarded.Count != 0 {
		t.Errorf("guarded run across a failover to a lagging replica: %d violations: %v", r.Guarded.Count, r.Guarded.Violations)
	}
	if r.Guarded.Acknowledged == 0 || r.Control.Count == 0 || r.Verdict != proof.VerdictPass {
		t.Errorf("guarded acknowledged %d, control violations %d, verdict %s: the run did not exercise the guard", r.Guarded.Acknowledged, r.Control.Count, r.Verdict)
	}
	if r.Error != "" {
		t.Errorf("run error: %s", r.Error)
	}
	if err := s.Failover(t.Context()); err == nil {
		t.Error("a second failover did not fail")
	}
}

// Workers reach the store through a proxy that delays, cuts and
// black-holes their connections, on top of pauses: the guarded runs stay
// clean and every proxy fault is counted by kind.
func TestProofProxyFaults(t *testing.T) {
	t.Parallel() // beside the store-fault tests, on the shared servers
	for name, store := range map[string]func(t *testing.T) string{
		"redis":    func(t *testing.T) string { return "redis://" + testenv.SharedRedis(t).Addr() },
		"postgres": func(t *testing.T) string { return testenv.SharedPostgres(t).NewDatabase(t) },
	} {
		t.Run(name, func(t *testing.T) {
			workloads := []string{"lease-counter"}
			if name == "redis" {
				workloads = append(workloads, "idempotency")
			}
			o := options(t, store(t), 3*time.Second, workloads...)
			o.Faults.Proxy = true
			rs := prove(t, o)
			for _, r := range rs {
				if proxyFaults(r, "") == 0 || !strings.Contains(r.Detail, "proxy") {
					t.Errorf("%s on %s: faults %v, detail %q: no proxy fault", r.Workload, r.Store, r.Faults, r.Detail)
				}
			}
		})
	}
}

// proxyFaults counts r's proxy faults whose kind starts with prefix
// ("proxy-" when prefix is ""): delays, cuts and black holes, and the
// holds aimed at a holder (proxy-hold-aimed-*).
func proxyFaults(r proof.Result, prefix string) int {
	if prefix == "" {
		prefix = "proxy-"
	}
	n := 0
	for kind, c := range r.Faults {
		if strings.HasPrefix(kind, prefix) {
			n += c
		}
	}
	return n
}

// Proxy faults alone (no pauses): the nemesis only toggles the proxy.
func TestProofProxyOnly(t *testing.T) {
	t.Parallel() // a server of its own; runs beside the other store-fault tests
	// The nemesis times its faults by the TTL, so a busy machine may fit
	// fewer of them into a run: run longer until both kinds happened.
	var r proof.Result
	for d := 2 * time.Second; ; d *= 2 {
		o := options(t, "redis://"+testenv.SharedRedis(t).Addr(), d, "lease-counter")
		o.Faults = proof.Faults{Proxy: true, NoPause: true, NoKill: true, ProxyDelay: 20 * time.Millisecond}
		rs, err := proof.Run(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		r = rs[0]
		if proxyFaults(r, "proxy-hold-") > 0 && proxyFaults(r, "")-proxyFaults(r, "proxy-hold-") > 0 || d >= 16*time.Second {
			break
		}
	}
	if r.Faults["pause"] != 0 || r.Faults["kill"] != 0 {
		t.Errorf("faults %v: workers were paused or killed", r.Faults)
	}
	if proxyFaults(r, "")-proxyFaults(r, "proxy-hold-") == 0 {
		t.Errorf("faults %v: no proxy fault", r.Faults)
	}
	if proxyFaults(r, "proxy-hold-") == 0 {
		t.Errorf("faults %v: no aimed hold of a holder's connections", r.Faults)
	}
	if r.Guarded.Count != 0 || r.Error != "" {
		t.Errorf("guarded: %d violations %v; error %q", r.Guarded.Count, r.Guarded.Violations, r.Error)
	}
}

// Proxy faults need one TCP address: Redis Cluster is refused with a
// reason.
func TestProofProxyRedisCluster(t *testing.T) {
	t.Parallel() // a server of its own; runs beside the other store-fault tests
	o := options(t, "redis://"+testenv.SharedRedisCluster(t).Addrs()[0], time.Second, "lease-counter")
	o.Faults.Proxy = true
	rs, err := proof.Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Verdict != proof.VerdictError || !strings.Contains(rs[0].Error, "Cluster") {
		t.Errorf("verdict %s, error %q; want an error about Redis Cluster", rs[0].Verdict, rs[0].Error)
	}
}

// A Redis server started by the run, with every write synced, killed and
// restarted during the lease workload: nothing acknowledged is lost.
func TestProofStartedStoreRestart(t *testing.T) {
	t.Parallel() // a server of its own; runs beside the other store-fault tests
	testenv.RequireBinary(t, "redis-server")
	s, err := proof.StartStore(t.Context(), "redis", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := options(t, s.URL, 3*time.Second, "lease-counter")
	o.Faults.Restart = s.Restart
	rs, err := proof.Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	t.Logf("guarded: %+v; faults %v", r.Guarded, r.Faults)
	if r.Faults["store-restart"] != 1 {
		t.Fatalf("faults %v, want one store restart", r.Faults)
	}
	if r.Guarded.Count != 0 || r.Guarded.Acknowledged == 0 || r.Error != "" {
		t.Errorf("guarded: %d acknowledged, %d violations %v; error %q", r.Guarded.Acknowledged, r.Guarded.Count, r.Guarded.Violations, r.Error)
	}
	if _, err := proof.StartStore(t.Context(), "postgres", ""); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("StartStore(postgres) = %v, want an invalid-argument error", err)
	}
}
