package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/cmd/tenure/internal/clienttest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func TestMain(m *testing.M) {
	defer func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}()
	testenv.Main(m)
}

// The previous version is built from the commit recorded in
// testdata/previous ("COMMIT SCHEMA"): tenure as it was at the schema
// version before this one, with this same program. Building it from the
// repository's history (rather than keeping a copy of its sources) tests
// exactly what was released, and costs nothing to keep.
func previous(t *testing.T) (commit string, schema int) {
	t.Helper()
	b, err := os.ReadFile("testdata/previous")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("testdata/previous: want \"COMMIT SCHEMA\", have %q", b)
	}
	schema, err = strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("testdata/previous: schema %q: %v", f[1], err)
	}
	return f[0], schema
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.work above %s", dir)
		}
	}
}

var (
	buildOnce sync.Once
	oldBin    string
	newBin    string
	buildErr  error
	binDir    string
)

// binaries builds this program at the recorded commit and at this
// checkout, once per test binary.
func binaries(t *testing.T) (oldPeer, newPeer string) {
	t.Helper()
	commit, _ := previous(t)
	root := repoRoot(t)
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tenure-compat-")
		if buildErr != nil {
			return
		}
		src := filepath.Join(binDir, "src")
		if buildErr = checkout(root, commit, src); buildErr != nil {
			return
		}
		oldBin = filepath.Join(binDir, "peer-"+commit[:12])
		if buildErr = goBuild(src, oldBin); buildErr != nil {
			buildErr = fmt.Errorf("building the previous version (%s): %w", commit[:12], buildErr)
			return
		}
		newBin = filepath.Join(binDir, "peer-current")
		buildErr = goBuild(root, newBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return oldBin, newBin
}

// checkout writes the tree of commit into dir, fetching the commit first
// when a shallow clone lacks it.
func checkout(root, commit, dir string) error {
	git := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
		c.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
		return c.CombinedOutput()
	}
	if out, err := git("cat-file", "-e", commit+"^{commit}"); err != nil {
		if fout, ferr := git("fetch", "--quiet", "--depth=1", "origin", commit); ferr != nil {
			return fmt.Errorf("the previous version is commit %s, which git cannot read here (%v: %s) nor fetch (%v: %s); "+
				"run the mixed-version tests in a clone of the repository with its history (no --depth)",
				commit, err, strings.TrimSpace(string(out)), ferr, strings.TrimSpace(string(fout)))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tar := filepath.Join(filepath.Dir(dir), "src.tar")
	if out, err := git("archive", "--format=tar", "-o", tar, commit); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", commit, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tar, "-C", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %v: %s", err, out)
	}
	return os.Remove(tar)
}

// goBuild builds cmd/tenure/internal/compatpeer of the tree at root, in
// that tree's own workspace.
func goBuild(root, out string) error {
	c := exec.Command("go", "build", "-buildvcs=false", "-o", out, "./internal/compatpeer")
	c.Dir = filepath.Join(root, "cmd", "tenure")
	c.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"), "GOFLAGS=")
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, b)
	}
	return nil
}

// instance is one running peer process.
type instance struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	errs  *strings.Builder
}

func start(t *testing.T, name, bin, store string) *instance {
	t.Helper()
	c := exec.Command(bin, "-store", store)
	c.Env = append(os.Environ(), "TENURE_STORE_PASSWORD=")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &instance{name: name, cmd: c, in: in, lines: make(chan string), errs: &strings.Builder{}}
	c.Stderr = p.errs
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(p.stop)
	if l := p.read(t); l != "ready" {
		t.Fatalf("%s: first line %q, want ready", name, l)
	}
	return p
}

// read waits for the next reply. The deadline only stops a hung peer:
// each reply is one or two store round trips.
func (p *instance) read(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.cmd.Wait()
			t.Fatalf("%s exited: %s", p.name, p.errs.String())
		}
		return l
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no reply within 2m", p.name)
		return ""
	}
}

// do sends one command and returns the reply's fields; a reply "err …"
// fails the test.
func (p *instance) do(t *testing.T, cmd string) []string {
	t.Helper()
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	l := p.read(t)
	if strings.HasPrefix(l, "err ") {
		t.Fatalf("%s: %s: %s", p.name, strings.Fields(cmd)[0], l)
	}
	return strings.Fields(l)
}

func (p *instance) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	io.WriteString(p.in, "quit\n")
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func want(t *testing.T, who *instance, cmd string, got []string, first string) []string {
	t.Helper()
	if len(got) == 0 || got[0] != first {
		t.Fatalf("%s: %s = %q, want %s", who.name, cmd, got, first)
	}
	return got
}

func fenceOf(t *testing.T, f []string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("fence %q: %v", f[1], err)
	}
	return n
}

// state is what one round of checks left behind, for checks after a
// rollback: an ended session, a settled slot, the greatest fence of a key
// and of a fenced value.
type state struct {
	key, value, job, slot, revoked string
	fence                          uint64
}

// across runs every cross-version check with x acting first and y second,
// under names unique to tag.
func across(t *testing.T, tag string, x, y *instance) state {
	t.Helper()
	key, value := "compat/"+tag+"/lock", "compat/"+tag+"/value"
	// Leases are exclusive across the two: y cannot take what x holds, and
	// the next grant's fence is above x's.
	c := "acquire " + key + " 1m"
	gx := want(t, x, c, x.do(t, c), "ok")
	want(t, y, c, y.do(t, c), "held")
	want(t, x, "release", x.do(t, "release "+key+" "+gx[2]), "ok")
	gy := want(t, y, c, y.do(t, c), "ok")
	fx, fy := fenceOf(t, gx), fenceOf(t, gy)
	if fy <= fx {
		t.Fatalf("%s granted fence %d after %s's %d: fences went back", y.name, fy, x.name, fx)
	}
	want(t, x, c, x.do(t, c), "held")
	// A release with another tenure's token changes nothing.
	want(t, x, "release (stale token)", x.do(t, "release "+key+" "+gx[2]), "not-held")
	want(t, x, c, x.do(t, c), "held")
	want(t, y, "release", y.do(t, "release "+key+" "+gy[2]), "ok")

	// Fenced writes: what one admitted, the other refuses below.
	want(t, y, "write", y.do(t, fmt.Sprintf("write %s %d by-%s", value, fy, y.name)), "ok")
	want(t, x, "write (older fence)", x.do(t, fmt.Sprintf("write %s %d by-%s", value, fx, x.name)), "stale")
	r := want(t, x, "read", x.do(t, "read "+value), "ok")
	if fenceOf(t, r) != fy || len(r) != 3 || r[2] != "by-"+y.name {
		t.Fatalf("%s reads %q, want fence %d by-%s", x.name, r, fy, y.name)
	}

	// Sessions: a revocation by either ends the session for both, and a
	// save that loaded before the revocation does not bring it back.
	user := "compat-" + tag
	s := want(t, x, "create", x.do(t, "create "+user), "ok")[1]
	want(t, y, "load", y.do(t, "load "+s), "ok")
	want(t, x, "load", x.do(t, "load "+s), "ok")
	want(t, y, "save", y.do(t, "save "+s), "ok")
	want(t, x, "save (loaded before the other's save)", x.do(t, "save "+s), "conflict")
	want(t, x, "load", x.do(t, "load "+s), "ok")
	if n := want(t, y, "revoke-user", y.do(t, "revoke-user "+user), "ok"); n[1] != "1" {
		t.Fatalf("%s revoked %s sessions, want 1", y.name, n[1])
	}
	want(t, x, "load (revoked)", x.do(t, "load "+s), "gone")
	want(t, x, "save (late, after the revocation)", x.do(t, "save "+s), "gone")
	want(t, y, "load (revoked)", y.do(t, "load "+s), "gone")

	// Slots: one completed by either is never run again by the other.
	job := "compat-" + tag
	for i, pair := range [][2]*instance{{x, y}, {y, x}} {
		slot := "2026-01-01T00:0" + strconv.Itoa(i) + ":00Z"
		want(t, pair[0], "slot", pair[0].do(t, "slot "+job+" "+slot), "done")
		want(t, pair[1], "slot (done by the other)", pair[1].do(t, "slot "+job+" "+slot), "final")
	}
	return state{key: key, value: value, job: job, slot: "2026-01-01T00:00:00Z", revoked: s, fence: fy}
}

// still checks, on p, what an earlier round left: the session stays
// revoked, the slot stays settled, and fences stay above the earlier ones.
func still(t *testing.T, p *instance, s state) {
	t.Helper()
	want(t, p, "load (revoked earlier)", p.do(t, "load "+s.revoked), "gone")
	want(t, p, "slot (settled earlier)", p.do(t, "slot "+s.job+" "+s.slot), "final")
	g := want(t, p, "acquire", p.do(t, "acquire "+s.key+" 1m"), "ok")
	if f := fenceOf(t, g); f <= s.fence {
		t.Fatalf("%s granted fence %d, not above the earlier %d", p.name, f, s.fence)
	}
	want(t, p, "release", p.do(t, "release "+s.key+" "+g[2]), "ok")
	want(t, p, "write (earlier fence)", p.do(t, fmt.Sprintf("write %s %d late", s.value, s.fence-1)), "stale")
}

// TestMixedVersions runs the previous version and this one side by side
// on one PostgreSQL database, one SQLite file and one Redis, at this
// version's schema, then rolls back (this version's down migration, then
// the previous version alone) and checks again.
func TestMixedVersions(t *testing.T) {
	oldPeer, newPeer := binaries(t)
	commit, prevSchema := previous(t)
	t.Logf("previous version: %s (schema %d); this one: schema %d", commit[:12], prevSchema, pgstore.SchemaVersion)
	if pgstore.SchemaVersion != sqlitestore.SchemaVersion || prevSchema != pgstore.SchemaVersion-1 {
		t.Fatalf("testdata/previous records a tenure at schema %d, and this one is at %d (SQLite %d): "+
			"with a new schema version, record the last commit at the version before it", prevSchema, pgstore.SchemaVersion, sqlitestore.SchemaVersion)
	}
	ctx := context.Background()

	type target struct {
		name, store string
		// rollback undoes this version's migrations, down to the previous
		// version's schema, and checks that the store is there.
		rollback func(t *testing.T)
	}
	targets := []func(t *testing.T) target{
		func(t *testing.T) target {
			dsn := testenv.SharedPostgres(t).NewDatabase(t)
			pg := clienttest.PGXPool(t, dsn)
			st, err := pgstore.New(pg, &pgstore.Options{Schema: "tenure"})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return target{"postgres", dsn, func(t *testing.T) {
				if loss, err := st.MigrateDown(ctx, prevSchema, false); err != nil || len(loss) != 0 {
					t.Fatalf("migrate down to %d: %v, loss %v", prevSchema, err, loss)
				}
				if ms, err := st.MigrationStatus(ctx); err != nil || ms.Current != prevSchema {
					t.Fatalf("after the rollback: %+v, %v", ms, err)
				}
			}}
		},
		func(t *testing.T) target {
			path := filepath.Join(t.TempDir(), "tenure.db")
			st, err := sqlitestore.Open(ctx, path, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return target{"sqlite", "sqlite:" + path, func(t *testing.T) {
				if loss, err := st.MigrateDown(ctx, prevSchema, false); err != nil || len(loss) != 0 {
					t.Fatalf("migrate down to %d: %v, loss %v", prevSchema, err, loss)
				}
				if ms, err := st.MigrationStatus(ctx); err != nil || ms.Current != prevSchema {
					t.Fatalf("after the rollback: %+v, %v", ms, err)
				}
			}}
		},
		func(t *testing.T) target {
			// Redis keeps no schema: rolling back is running the previous
			// version alone on what this one wrote.
			return target{"redis", "redis://" + testenv.SharedRedis(t).Addr() + "/0", func(t *testing.T) {}}
		},
	}
	for i, mk := range targets {
		t.Run([]string{"postgres", "sqlite", "redis"}[i], func(t *testing.T) {
			tg := mk(t)
			old := start(t, "previous", oldPeer, tg.store)
			cur := start(t, "current", newPeer, tg.store)
			across(t, tg.name+"-1", old, cur)
			last := across(t, tg.name+"-2", cur, old)

			// Rollback: this version's down migration, then the previous
			// version only (a second instance of it restarting on the
			// rolled-back store).
			cur.stop()
			tg.rollback(t)
			old2 := start(t, "previous-restarted", oldPeer, tg.store)
			still(t, old, last)
			still(t, old2, last)
			across(t, tg.name+"-3", old, old2)
		})
	}
}
