package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/proof"
)

// The proof command re-executes this test binary as its workers (the
// package's init turns a worker process into one). A run whose control was
// lucky (inconclusive: a busy machine fits few operations into a short
// run) is run again, twice as long each time, as the proof package's own
// tests do.
func TestProofCommandEmbedded(t *testing.T) {
	var (
		rs  []proof.Result
		out string
		err error
	)
	for d := 3 * time.Second; ; d *= 2 {
		out, err = run("proof", "--workload", "lease-counter", "--duration", d.String(), "--json", "-q", "--dir", t.TempDir())
		rs = nil
		// The report is the first JSON value; an error line may follow it.
		if jerr := json.NewDecoder(strings.NewReader(out)).Decode(&rs); jerr != nil {
			t.Fatalf("%v (%v)\n%s", jerr, err, out)
		}
		// Run again only when every result passed or was inconclusive:
		// never past a violation or an error.
		again := slices.ContainsFunc(rs, func(r proof.Result) bool { return r.Verdict == proof.VerdictInconclusive }) &&
			!slices.ContainsFunc(rs, func(r proof.Result) bool {
				return r.Verdict != proof.VerdictInconclusive && r.Verdict != proof.VerdictPass
			})
		if err == nil || !again || d >= 24*time.Second {
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			break
		}
		t.Logf("a %v run was inconclusive; running again for %v", d, 2*d)
	}
	if len(rs) != 2 || rs[0].Store != "sqlite" || rs[1].Store != "memory" {
		t.Fatalf("results for %d stores, want sqlite and memory:\n%s", len(rs), out)
	}
	for _, r := range rs {
		if r.Verdict != proof.VerdictPass || r.Guarded.Count != 0 || r.Control.Count == 0 {
			t.Errorf("%s: verdict %s, guarded violations %d, control violations %d", r.Store, r.Verdict, r.Guarded.Count, r.Control.Count)
		}
		// The default faults include forget: the store is told to lose
		// ended leases. (On a loaded machine a SQLite file locked by a
		// paused worker can make every attempt of a short run time out:
		// attempted is what the defaults promise.)
		if r.Faults["forget"]+r.Faults["forget-failed"] == 0 {
			t.Errorf("%s: faults %v, want ended leases forgotten by default", r.Store, r.Faults)
		}
	}
}

func TestProofList(t *testing.T) {
	out, err := run("proof", "--list")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range proof.Workloads() {
		if !strings.Contains(out, w.Name) {
			t.Errorf("%s is not listed:\n%s", w.Name, out)
		}
	}
}

func TestProofBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"proof", "--workload", "nope"},
		{"proof", "--duration", "1ms"},
		{"proof", "--workers", "1"},
		{"proof", "--store", "ftp://example"},
		{"proof", "--fault", "flood"},
		{"proof", "--fault", "restart"},
		{"proof", "--fault", ""},
		{"proof", "--start-store", "cassandra"},
		{"proof", "--start-store", "redis", "--store", "memory"},
		{"proof", "--fault", "proxy", "--proxy-delay", "1h"},
		{"proof", "--fault", "failover", "--workload", "lease-counter"},
		{"proof", "--start-store", "redis", "--fault", "failover"},
		{"proof", "--start-store", "redis", "--fault", "failover,restart", "--workload", "lease-counter"},
	} {
		if out, err := run(args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}

// Store faults on a Redis server the command starts: the proxy delays,
// cuts and black-holes the workers' connections, the server is killed and
// restarted halfway, and each fault is reported by kind.
func TestProofCommandStoreFaults(t *testing.T) {
	testenv.RequireBinary(t, "redis-server")
	out, runErr := run("proof", "--start-store", "redis", "--workload", "lease-counter", "--duration", "3s",
		"--fault", "pause,proxy,restart", "--proxy-delay", "20ms", "--json", "-q", "--dir", t.TempDir())
	// The subject here is the fault wiring and the guarded run: in 3 s the
	// unguarded control may be lucky (an inconclusive run, exit status 1),
	// which the proof package's own tests do not accept.
	var rs []proof.Result
	// The report comes first; an inconclusive run's error line follows it.
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1:\n%s", len(rs), out)
	}
	r := rs[0]
	// Proxy faults are random (delay, cut, black hole) or aimed at a
	// grant (proxy-hold-aimed-*): on a busy machine 3 s may bring only
	// the aimed kind.
	proxyFaults := 0
	for kind, n := range r.Faults {
		if strings.HasPrefix(kind, "proxy-") {
			proxyFaults += n
		}
	}
	if r.Faults["store-restart"] != 1 || proxyFaults == 0 || r.Faults["pause"] == 0 {
		t.Errorf("faults %v, want pauses, proxy faults and one store restart", r.Faults)
	}
	if (r.Verdict != proof.VerdictPass && r.Verdict != proof.VerdictInconclusive) || r.Guarded.Count != 0 {
		t.Errorf("verdict %s (%v), guarded violations %v", r.Verdict, runErr, r.Guarded.Violations)
	}
}

// The failover fault on a Redis server the command starts with a replica:
// the failover happens once and the guarded run loses nothing
// acknowledged.
func TestProofCommandFailover(t *testing.T) {
	testenv.RequireBinary(t, "redis-server")
	out, runErr := run("proof", "--start-store", "redis", "--workload", "lease-counter", "--duration", "3s",
		"--fault", "pause,failover", "--json", "-q", "--dir", t.TempDir())
	var rs []proof.Result
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1:\n%s", len(rs), out)
	}
	r := rs[0]
	if r.Faults["failover"] != 1 {
		t.Errorf("faults %v, want one failover", r.Faults)
	}
	if (r.Verdict != proof.VerdictPass && r.Verdict != proof.VerdictInconclusive) || r.Guarded.Count != 0 || r.Error != "" {
		t.Errorf("verdict %s (%v), guarded violations %v, error %q", r.Verdict, runErr, r.Guarded.Violations, r.Error)
	}
}
