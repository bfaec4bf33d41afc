package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/proof"
)

// The proof command re-executes this test binary as its workers (the
// package's init turns a worker process into one).
func TestProofCommandEmbedded(t *testing.T) {
	out, err := run("proof", "--workload", "lease-counter", "--duration", "3s", "--json", "-q", "--dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rs []proof.Result
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rs) != 2 || rs[0].Store != "sqlite" || rs[1].Store != "memory" {
		t.Fatalf("results for %d stores, want sqlite and memory:\n%s", len(rs), out)
	}
	for _, r := range rs {
		if r.Verdict != proof.VerdictPass || r.Guarded.Count != 0 || r.Control.Count == 0 {
			t.Errorf("%s: verdict %s, guarded violations %d, control violations %d", r.Store, r.Verdict, r.Guarded.Count, r.Control.Count)
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
	} {
		if out, err := run(args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}
