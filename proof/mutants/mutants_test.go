package mutants_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/proof/mutants"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// repoRoot is the checkout this package is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at the repository root %s: %v", root, err)
	}
	return root
}

// Every mutant of the list is well formed and applies to the tree as it is:
// a change to the code a mutant breaks must bring the mutant up to date.
func TestListApplies(t *testing.T) {
	list := mutants.List()
	if err := mutants.Check(list); err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	stores := map[string]bool{}
	for _, m := range list {
		if err := m.Verify(root); err != nil {
			t.Error(err)
		}
		if m.CI {
			stores[m.Store] = true
		}
	}
	if len(stores) < 3 {
		t.Errorf("the CI subset covers %d stores, want at least 3", len(stores))
	}
}

func TestOverlay(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "x < y && y < z\n")
	write("b.go", "x < y; x < y\n")
	m := mutants.Mutant{Name: "memory/m", Edits: []mutants.Edit{
		{File: "a.go", Old: "x < y", New: "true"},
		{File: "a.go", Old: "y < z", New: "false"},
	}}
	p, err := m.Overlay(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Replace map[string]string }
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(root, "a.go")
	if len(o.Replace) != 1 || o.Replace[a] == "" {
		t.Fatalf("overlay %s, want a.go replaced", b)
	}
	if got, _ := os.ReadFile(o.Replace[a]); string(got) != "true && false\n" {
		t.Errorf("mutated a.go = %q", got)
	}
	if got, _ := os.ReadFile(a); string(got) != "x < y && y < z\n" {
		t.Errorf("the tree was changed: a.go = %q", got)
	}
	// A fragment found twice, or not at all, is an error.
	for _, e := range []mutants.Edit{{File: "b.go", Old: "x < y", New: "true"}, {File: "a.go", Old: "nowhere", New: "true"}} {
		m := mutants.Mutant{Name: "memory/m", Edits: []mutants.Edit{e}}
		if _, err := m.Overlay(root, t.TempDir()); !errors.Is(err, mutants.ErrNoMatch) {
			t.Errorf("Overlay with %+v: %v, want ErrNoMatch", e, err)
		}
		if err := m.Verify(root); !errors.Is(err, mutants.ErrNoMatch) {
			t.Errorf("Verify with %+v: %v, want ErrNoMatch", e, err)
		}
	}
}

func TestSelect(t *testing.T) {
	list := mutants.List()
	all, err := mutants.Select(list, "all")
	if err != nil || len(all) != len(list) {
		t.Fatalf("all: %d mutants, %v", len(all), err)
	}
	ci, err := mutants.Select(list, "ci")
	if err != nil || len(ci) == 0 || len(ci) >= len(list) {
		t.Fatalf("ci: %d of %d mutants, %v", len(ci), len(list), err)
	}
	for _, m := range ci {
		if !m.CI {
			t.Errorf("ci selected %s", m.Name)
		}
	}
	some, err := mutants.Select(list, "sqlite/*, "+list[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range some {
		if m.Store != "sqlite" && m.Name != list[0].Name {
			t.Errorf("sqlite/* selected %s", m.Name)
		}
	}
	for _, bad := range []string{"", "nope/none", "sqlite/["} {
		if _, err := mutants.Select(list, bad); err == nil {
			t.Errorf("Select(%q) did not fail", bad)
		}
	}
}

func TestWriteTable(t *testing.T) {
	m := mutants.List()[0]
	var b bytes.Buffer
	err := mutants.WriteTable(&b, []mutants.Result{
		{Mutant: m, Proof: mutants.Outcome{Caught: true, Detail: "caught"}, Conformance: mutants.Outcome{Caught: true}},
		{Mutant: m, Proof: mutants.Outcome{Detail: "lease-counter pass"}, Conformance: mutants.Outcome{Caught: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"MUTANT", m.Name, "yes", "NO", "lease-counter pass", "2 mutants, 1 caught by both suites, 1 survived"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestMutants runs the mutants TENURE_MUTANTS selects ("ci", "all", or
// names and patterns; see scripts/mutants) and fails for every survivor.
// TENURE_MUTANTS_ONLY=proof or conformance runs one suite only (every
// mutant then survives the other), for work on one of them.
func TestMutants(t *testing.T) {
	spec := os.Getenv("TENURE_MUTANTS")
	if spec == "" {
		t.Skip("set TENURE_MUTANTS=ci, all or a list of mutants to run them (scripts/mutants; scripts/test runs the CI subset)")
	}
	sel, err := mutants.Select(mutants.List(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if only := os.Getenv("TENURE_MUTANTS_ONLY"); only != "" && only != "proof" && only != "conformance" {
		t.Fatalf("TENURE_MUTANTS_ONLY=%q: want proof or conformance", only)
	}
	work := t.TempDir()
	var n atomic.Int64
	r := &mutants.Runner{
		Root: repoRoot(t),
		Work: work,
		Log:  logWriter{t},
		Only: os.Getenv("TENURE_MUTANTS_ONLY"),
		Store: func(store string) (string, error) {
			switch store {
			case "memory":
				return "memory", nil
			case "sqlite":
				return "sqlite:" + filepath.Join(work, fmt.Sprintf("proof-%d.db", n.Add(1))), nil
			case "postgres":
				return testenv.SharedPostgres(t).NewDatabase(t), nil
			case "redis":
				return "redis://" + testenv.SharedRedis(t).Addr(), nil
			case "etcd":
				return "etcd://" + strings.TrimPrefix(testenv.SharedEtcd(t).Endpoints()[0], "http://"), nil
			}
			return "", fmt.Errorf("no server for store %q", store)
		},
	}
	t.Logf("%d mutants (TENURE_MUTANTS=%s)", len(sel), spec)
	var results []mutants.Result
	for _, m := range sel {
		if t.Context().Err() != nil {
			break
		}
		res := r.Run(t.Context(), m)
		results = append(results, res)
		if res.Survived() {
			t.Errorf("%s survived: proof %s (%s); conformance %s (%s); %v", m.Name,
				res.Proof, res.Proof.Detail, res.Conformance, res.Conformance.Detail, res.Err)
		}
	}
	var b bytes.Buffer
	mutants.WriteTable(&b, results)
	fmt.Fprintf(os.Stdout, "\n%s\n", b.String())
	if p := os.Getenv("TENURE_MUTANTS_REPORT"); p != "" {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// logWriter sends each line to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
