package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that turns a missing server binary
// from a skipped test into a failed one when set to "1".
const RequireEnv = "TENURE_TEST_REQUIRE"

// Main runs the tests of m, stops every shared server started by them and
// exits the process with the tests' exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	for _, err := range stopShared() {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// installHints says which Debian package provides each binary.
var installHints = map[string]string{
	"redis-server": "apt-get install redis-server",
	"etcd":         "apt-get install etcd-server",
	"initdb":       "apt-get install postgresql",
	"postgres":     "apt-get install postgresql",
	"pg_ctl":       "apt-get install postgresql",
	"psql":         "apt-get install postgresql",
	"chromium":     "apt-get install chromium",
	"prometheus":   "apt-get install prometheus",
}

// postgresBinaries are looked up in /usr/lib/postgresql/*/bin after PATH.
var postgresBinaries = map[string]bool{"initdb": true, "postgres": true, "pg_ctl": true, "psql": true}

// RequireBinary returns the absolute path of the executable name. It is
// looked up on PATH and, for PostgreSQL's binaries (initdb, postgres,
// pg_ctl), then in /usr/lib/postgresql/*/bin, newest major version first.
// When the binary cannot be found the test is skipped, or failed when the
// environment variable TENURE_TEST_REQUIRE is "1", with a message naming
// the binary and how to install it.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	path, err := lookBinary(name)
	if err == nil {
		return path
	}
	hint := installHints[name]
	if hint == "" {
		hint = "install it"
	}
	msg := fmt.Sprintf("testenv: %s not found (%v); install it with `%s`", name, err, hint)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1 makes this a failure)", msg, RequireEnv)
		return ""
	}
	t.Skipf("%s (skipping; set %s=1 to fail instead)", msg, RequireEnv)
	return ""
}

// lookBinary finds name on PATH or, for PostgreSQL, in the Debian layout.
func lookBinary(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return filepath.Abs(path)
	}
	if !postgresBinaries[name] {
		return "", err
	}
	for _, dir := range postgresBinDirs() {
		p := filepath.Join(dir, name)
		if st, serr := os.Stat(p); serr == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("not on PATH nor in /usr/lib/postgresql/*/bin")
}

// postgresBinDirs lists /usr/lib/postgresql/*/bin, newest version first.
func postgresBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

// sanitize turns s into a short lowercase identifier made of [a-z0-9_].
func sanitize(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= max {
			break
		}
	}
	return b.String()
}
