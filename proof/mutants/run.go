package mutants

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tenurekit/tenure/proof"
)

// Runner runs mutants on a source tree.
type Runner struct {
	// Root is the repository's root. It is only read: each mutant is
	// built with its files overlaid (go build -overlay).
	Root string
	// Work receives the binaries built and the proof runs' files.
	Work string
	// Store returns the --store value for a proof run on store (memory,
	// sqlite, postgres, redis, etcd); it is called once per mutant, so it
	// may hand out a fresh database each time.
	Store func(store string) (string, error)
	// Log receives one line per step. Nil means none.
	Log io.Writer
	// ProofTimeout bounds one `tenure proof` run (default 5m: the default
	// duration of 10s per workload, the settling and the checks, on a
	// loaded machine). ConformanceTimeout bounds one conformance run
	// (default 10m).
	ProofTimeout, ConformanceTimeout time.Duration
	// Only runs one suite: "proof" or "conformance" ("" runs both). A
	// suite not run counts as not caught.
	Only string
}

// Outcome is what one suite did with a mutant.
type Outcome struct {
	// Caught: the suite failed (conformance) or reported a violation
	// (proof).
	Caught bool
	// Took is how long the run took, builds excluded.
	Took time.Duration
	// Detail names what caught the mutant, or says why nothing did.
	Detail string
	// Err is set when the run could not tell (an unknown workload, a
	// pattern that matches no test, a run that could not start); a
	// mutant with an error is not caught.
	Err error
}

func (o Outcome) String() string {
	switch {
	case o.Err != nil:
		return "ERROR"
	case o.Caught:
		return fmt.Sprintf("yes %5.1fs", o.Took.Seconds())
	}
	return fmt.Sprintf("NO  %5.1fs", o.Took.Seconds())
}

// Result is one mutant's run.
type Result struct {
	Mutant             Mutant
	Proof, Conformance Outcome
	// Err is set when the mutant does not apply or does not build.
	Err error
}

// Survived reports whether the mutant was not caught by both suites (or
// could not be run).
func (r Result) Survived() bool {
	return r.Err != nil || !r.Proof.Caught || !r.Conformance.Caught
}

// Run builds the tree with m applied, runs its conformance subtests and
// `tenure proof` on its workloads.
func (r *Runner) Run(ctx context.Context, m Mutant) Result {
	res := Result{Mutant: m}
	dir := filepath.Join(r.Work, strings.ReplaceAll(m.Name, "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	defer os.RemoveAll(dir)
	overlay, err := m.Overlay(r.Root, dir)
	if err != nil {
		res.Err = err
		return res
	}
	tenure, conf := filepath.Join(dir, "tenure"), filepath.Join(dir, "conformance.test")
	if r.Only != "conformance" {
		r.logf("%s: building ./cmd/tenure", m.Name)
		if err := r.goCmd(ctx, "build", "-overlay", overlay, "-o", tenure, "./cmd/tenure"); err != nil {
			res.Err = fmt.Errorf("mutants: %s does not build: %w", m.Name, err)
			return res
		}
	}
	if r.Only != "proof" {
		r.logf("%s: building the %s conformance tests", m.Name, m.Package())
		if err := r.goCmd(ctx, "test", "-c", "-overlay", overlay, "-o", conf, m.Package()); err != nil {
			res.Err = fmt.Errorf("mutants: %s: the conformance tests do not build: %w", m.Name, err)
			return res
		}
	}
	res.Conformance = Outcome{Detail: "not run"}
	if r.Only != "proof" {
		r.logf("%s: conformance %s -run %s", m.Name, m.Package(), m.Pattern())
		res.Conformance = r.conformance(ctx, m, conf)
		r.logf("%s: conformance caught: %s %s", m.Name, res.Conformance, res.Conformance.Detail)
	}
	res.Proof = Outcome{Detail: "not run"}
	if r.Only != "conformance" {
		r.logf("%s: tenure proof --workload %s on %s", m.Name, strings.Join(m.Workloads, ","), m.Store)
		res.Proof = r.proof(ctx, m, tenure, dir)
		r.logf("%s: proof caught: %s %s", m.Name, res.Proof, res.Proof.Detail)
	}
	return res
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "mutants: "+format+"\n", args...)
	}
}

// env is the environment of the commands run in the tree: its own go.work,
// and missing server binaries are failures, not skips.
func (r *Runner) env() []string {
	return append(os.Environ(), "GOWORK="+filepath.Join(r.Root, "go.work"), "TENURE_TEST_REQUIRE=1")
}

func (r *Runner) goCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = r.Root
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return nil
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// conformance runs the compiled conformance tests on m's pattern: caught
// when they fail.
func (r *Runner) conformance(ctx context.Context, m Mutant, bin string) Outcome {
	timeout := r.ConformanceTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	cmd := exec.CommandContext(ctx, bin, "-test.run", m.Pattern(), "-test.count=1", "-test.timeout", timeout.String())
	cmd.Dir = filepath.Join(r.Root, filepath.FromSlash(m.Package()))
	// The tests run in the package's directory (they read its testdata);
	// what a failing test leaves there (a property test's failure file)
	// is removed, so that the checkout stays as it was.
	before := files(cmd.Dir)
	defer removeNew(cmd.Dir, before)
	cmd.Env = r.env()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	o := Outcome{Took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
		if bytes.Contains(out, []byte("no tests to run")) {
			o.Err = fmt.Errorf("-run %s matches no test", m.Pattern())
			o.Detail = o.Err.Error()
			return o
		}
		o.Detail = "every test passed"
		return o
	case !errors.As(err, &exit):
		o.Err = err
		o.Detail = err.Error()
		return o
	}
	o.Caught = true
	// The leaves: failed tests none of whose subtests failed.
	var names []string
	for _, sm := range failLine.FindAllSubmatch(out, -1) {
		names = append(names, string(sm[1]))
	}
	var leaves []string
	for _, n := range names {
		leaf := true
		for _, o := range names {
			if strings.HasPrefix(o, n+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			leaves = append(leaves, n)
		}
	}
	// A failure of the suite itself, with no case under it failing, is a
	// mutant that breaks the suite's setup (a statement that no longer
	// parses, a panic): it says nothing about the guarantee.
	depth := len(strings.Split(m.Pattern(), "/"))
	deep := slices.ContainsFunc(leaves, func(n string) bool { return len(strings.Split(n, "/")) > depth })
	if len(leaves) > 0 && !deep {
		o.Caught = false
		o.Err = fmt.Errorf("only %s failed, no case in it: the mutant breaks the suite's setup, not the guarantee", strings.Join(leaves, ", "))
		o.Detail = o.Err.Error()
		return o
	}
	switch {
	case len(leaves) == 0:
		o.Detail = fmt.Sprintf("exit %d: %s", exit.ExitCode(), firstLine(tail(out, 300)))
	case len(leaves) == 1:
		o.Detail = leaves[0]
	default:
		o.Detail = fmt.Sprintf("%s and %d more", leaves[0], len(leaves)-1)
	}
	return o
}

// proof runs the mutated tenure proof on m's workloads: caught when one of
// them reports a violation (verdict fail).
func (r *Runner) proof(ctx context.Context, m Mutant, bin, dir string) Outcome {
	store, err := r.Store(m.Store)
	if err != nil {
		return Outcome{Err: err, Detail: err.Error()}
	}
	timeout := r.ProofTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"proof", "--store", store, "--json", "--quiet", "--dir", filepath.Join(dir, "proof")}
	for _, w := range m.Workloads {
		args = append(args, "--workload", w)
	}
	if m.Faults != "" {
		args = append(args, "--fault", m.Faults)
	}
	if m.Duration > 0 {
		args = append(args, "--duration", m.Duration.String())
	}
	cmd := exec.CommandContext(pctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	o := Outcome{Took: time.Since(start)}
	var results []proof.Result
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil || len(results) == 0 {
		o.Err = fmt.Errorf("tenure proof gave no report (%v): %s", runErr, firstLine(tail(stderr.Bytes(), 400)))
		o.Detail = o.Err.Error()
		return o
	}
	var notes []string
	for _, pr := range results {
		if pr.Verdict == proof.VerdictFail {
			o.Caught = true
			v := ""
			if len(pr.Guarded.Violations) > 0 {
				v = ": " + pr.Guarded.Violations[0]
			}
			o.Detail = fmt.Sprintf("%s: %d violations%s", pr.Workload, pr.Guarded.Count, v)
			return o
		}
		n := pr.Workload + " " + pr.Verdict
		if pr.Error != "" {
			n += " (" + pr.Error + ")"
		}
		notes = append(notes, n)
	}
	o.Detail = strings.Join(notes, "; ")
	return o
}

// files lists the paths under dir.
func files(dir string) map[string]bool {
	out := map[string]bool{}
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			out[p] = true
		}
		return nil
	})
	return out
}

// removeNew removes what appeared under dir since before was listed.
func removeNew(dir string, before map[string]bool) {
	var added []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !before[p] {
			added = append(added, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	for _, p := range added {
		os.RemoveAll(p)
	}
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
