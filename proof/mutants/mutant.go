package mutants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Stores a mutant can belong to, each with the package of its conformance
// suite.
var storePackages = map[string]string{
	"memory":   "./store/memstore",
	"sqlite":   "./store/sqlitestore",
	"postgres": "./store/pgstore",
	"redis":    "./store/redisstore",
	"etcd":     "./store/etcdstore",
}

// suites are the conformance suites storetest.Run runs.
var suites = []string{"Lease", "Idempotency", "RateLimit", "Session", "Schedule"}

// Edit replaces the one occurrence of Old in File (a slash-separated path
// from the repository root) by New.
type Edit struct {
	File     string
	Old, New string
}

// Mutant is one guarantee broken on purpose.
type Mutant struct {
	// Name is "store/what", unique in the list.
	Name string
	// Store is memory, sqlite, postgres, redis or etcd.
	Store string
	// Breaks says, for the table's reader, which guarantee is broken.
	Breaks string
	// Edits are applied together.
	Edits []Edit
	// Workloads are the `tenure proof` workloads that must catch it (one
	// run with every one of them; any one reporting a violation is a
	// catch).
	Workloads []string
	// Suite names the conformance subtests that must fail: a suite of
	// storetest.Run ("Lease", "Idempotency", "Session", "Schedule",
	// "RateLimit"), optionally followed by subtest names
	// ("Schedule/FakeClock"). See Pattern.
	Suite string
	// CI puts the mutant in the subset scripts/test runs.
	CI bool
	// Faults, if set, is the proof run's --fault list (default: the
	// command's default faults), for a guarantee that one of them would
	// mask.
	Faults string
	// Duration, if set, is the proof run's --duration (default: the
	// command's, 10s), for a guarantee whose loss shows only when a fault
	// lands in a narrow window on a store whose runs see few faults (etcd,
	// whose leases last whole seconds).
	Duration time.Duration
}

// Pattern is the -run pattern of m's conformance subtests: Suite under
// the store's TestConformance (under its Single subtest on Redis and etcd,
// which run the suites on one server and again on a cluster), each
// element anchored so that no other test runs.
func (m Mutant) Pattern() string {
	elems := []string{"TestConformance"}
	if m.Store == "redis" || m.Store == "etcd" {
		elems = append(elems, "Single")
	}
	elems = append(elems, strings.Split(m.Suite, "/")...)
	for i, e := range elems {
		elems[i] = "^" + e + "$"
	}
	return strings.Join(elems, "/")
}

// Package is the import path, from the repository root, of the store's
// conformance suite.
func (m Mutant) Package() string { return storePackages[m.Store] }

// ErrNoMatch reports a mutant whose fragment does not occur exactly once
// in its file: the code it breaks has changed, and the mutant must be
// brought up to date.
var ErrNoMatch = errors.New("mutants: fragment does not match exactly once")

// Overlay writes m's mutated files under dir and an overlay file naming
// them (the format of `go build -overlay`), and returns the overlay file's
// path. The tree at root is only read: builds with the overlay see the
// mutant, everything else sees the tree as it is.
func (m Mutant) Overlay(root, dir string) (string, error) {
	files := map[string][]byte{} // absolute path → mutated content
	var order []string
	for _, e := range m.Edits {
		p, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(e.File)))
		if err != nil {
			return "", err
		}
		b, ok := files[p]
		if !ok {
			if b, err = os.ReadFile(p); err != nil {
				return "", fmt.Errorf("mutants: %s: %w", m.Name, err)
			}
			order = append(order, p)
		}
		if n := bytes.Count(b, []byte(e.Old)); n != 1 {
			return "", fmt.Errorf("%w: %s: %s has %d occurrences of %q", ErrNoMatch, m.Name, e.File, n, e.Old)
		}
		files[p] = bytes.Replace(b, []byte(e.Old), []byte(e.New), 1)
	}
	replace := map[string]string{}
	for i, p := range order {
		q := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(p)))
		if err := os.WriteFile(q, files[p], 0o644); err != nil {
			return "", err
		}
		replace[p] = q
	}
	b, err := json.Marshal(struct{ Replace map[string]string }{replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

// Verify reports, without writing anything, whether every edit of m
// applies to the tree at root: an error wrapping ErrNoMatch when a fragment
// does not occur exactly once.
func (m Mutant) Verify(root string) error {
	dir, err := os.MkdirTemp("", "tenure-mutant-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, err = m.Overlay(root, dir)
	return err
}

// check reports what is wrong with m as declared.
func (m Mutant) check() error {
	store, _, ok := strings.Cut(m.Name, "/")
	switch {
	case !ok || store != m.Store:
		return fmt.Errorf("mutants: %q: the name must start with its store %q and a slash", m.Name, m.Store)
	case m.Package() == "":
		return fmt.Errorf("mutants: %s: unknown store %q", m.Name, m.Store)
	case m.Breaks == "":
		return fmt.Errorf("mutants: %s: says nothing about what it breaks", m.Name)
	case len(m.Edits) == 0:
		return fmt.Errorf("mutants: %s: no edit", m.Name)
	case len(m.Workloads) == 0:
		return fmt.Errorf("mutants: %s: no covering workload", m.Name)
	case m.Duration < 0:
		return fmt.Errorf("mutants: %s: negative proof duration %v", m.Name, m.Duration)
	case !slices.Contains(suites, strings.Split(m.Suite, "/")[0]):
		return fmt.Errorf("mutants: %s: unknown conformance suite %q (have %s)", m.Name, m.Suite, strings.Join(suites, ", "))
	}
	for _, e := range m.Edits {
		if e.Old == "" || e.Old == e.New {
			return fmt.Errorf("mutants: %s: an edit of %s changes nothing", m.Name, e.File)
		}
	}
	return nil
}

// Check checks the whole list: names unique, every field set.
func Check(list []Mutant) error {
	seen := map[string]bool{}
	var errs []error
	for _, m := range list {
		if seen[m.Name] {
			errs = append(errs, fmt.Errorf("mutants: %s: listed twice", m.Name))
		}
		seen[m.Name] = true
		if err := m.check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Select picks mutants from list by spec: "ci" (the CI subset), "all", or a
// comma-separated list of names and path.Match patterns ("redis/*"). A
// name or pattern that matches nothing is an error.
func Select(list []Mutant, spec string) ([]Mutant, error) {
	spec = strings.TrimSpace(spec)
	switch spec {
	case "":
		return nil, errors.New("mutants: empty selection")
	case "all":
		return list, nil
	case "ci":
		var out []Mutant
		for _, m := range list {
			if m.CI {
				out = append(out, m)
			}
		}
		return out, nil
	}
	var out []Mutant
	for _, pat := range strings.Split(spec, ",") {
		pat = strings.TrimSpace(pat)
		found := false
		for _, m := range list {
			ok, err := path.Match(pat, m.Name)
			if err != nil {
				return nil, fmt.Errorf("mutants: bad pattern %q: %w", pat, err)
			}
			if ok {
				found = true
				if !slices.ContainsFunc(out, func(o Mutant) bool { return o.Name == m.Name }) {
					out = append(out, m)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("mutants: %q matches no mutant", pat)
		}
	}
	return out, nil
}
