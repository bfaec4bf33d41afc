package pausetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lab"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
)

func TestMain(m *testing.M) {
	if os.Getenv("PAUSETEST_HOLDER") != "" {
		os.Exit(holder())
	}
	testenv.Main(m)
}

// holder is the child process: it takes the lease, reports its fence,
// waits for the word to write (it is frozen meanwhile), writes with its old
// fence or without a guard, and reports what the resource said.
func holder() int {
	ctx := context.Background()
	spec, prefix := os.Getenv("PAUSETEST_STORE"), os.Getenv("PAUSETEST_PREFIX")
	key, res, mode := os.Getenv("PAUSETEST_KEY"), os.Getenv("PAUSETEST_RESOURCE"), os.Getenv("PAUSETEST_MODE")
	ttl, err := time.ParseDuration(os.Getenv("PAUSETEST_TTL"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	envs, err := lab.OpenPrefix(ctx, spec, prefix)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	env := envs[0]
	defer env.Close()
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := lk.TryAcquire(ctx, key, ttl)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("fence", l.Fence())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Resumed: the process still "holds" its lease in memory and writes.
	if mode == "fenced" {
		err = env.Resource.FencedWrite(ctx, res, l.Fence(), "A-late")
	} else {
		err = env.Resource.PlainWrite(ctx, res, "A-late")
	}
	switch {
	case err == nil:
		fmt.Println("written")
	case errors.Is(err, fence.ErrStale):
		fmt.Println("stale")
	default:
		fmt.Println("error", err)
		return 1
	}
	return 0
}

// trial runs one story and returns what the late writer saw and the final
// value.
func trial(t *testing.T, env *lab.Env, spec, mode string, i int, ttl time.Duration) (late, final string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key := fmt.Sprintf("pause/%s/%d", mode, i)
	res := key + "/resource"
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"PAUSETEST_HOLDER=1", "PAUSETEST_STORE="+spec, "PAUSETEST_PREFIX="+env.Prefix,
		"PAUSETEST_KEY="+env.Key(key), "PAUSETEST_RESOURCE="+env.Key(res), "PAUSETEST_MODE="+mode,
		"PAUSETEST_TTL="+ttl.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line := readLine(t, out)
	fa, err := strconv.ParseUint(strings.TrimPrefix(line, "fence "), 10, 64)
	if err != nil {
		t.Fatalf("holder said %q", line)
	}
	// Freeze A past its lease.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := env.Leases.Inspect(ctx, env.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b, err := leasetest.NewLocker(t, env.Leases, nil).TryAcquire(ctx, env.Key(key), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if b.Fence() <= fa {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), fa)
	}
	if mode == "fenced" {
		err = env.Resource.FencedWrite(ctx, env.Key(res), b.Fence(), "B")
	} else {
		err = env.Resource.PlainWrite(ctx, env.Key(res), "B")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	late = readLine(t, out)
	final, err = env.Resource.Read(ctx, env.Key(res))
	if err != nil {
		t.Fatal(err)
	}
	return late, final
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("holder process: %v (read %q)", err, line)
	}
	return strings.TrimSpace(line)
}

// run does the guarded and the unguarded story n times each on spec.
func run(t *testing.T, spec string, n int, ttl time.Duration) {
	envs, err := lab.Open(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	env := envs[0]
	defer env.Close()
	for i := 0; i < n; i++ {
		if late, final := trial(t, env, spec, "fenced", i, ttl); late != "stale" || final != "B" {
			t.Fatalf("guarded trial %d: late writer saw %q, value %q; want stale and B", i, late, final)
		}
		if late, final := trial(t, env, spec, "plain", i, ttl); late != "written" || final != "A-late" {
			t.Fatalf("negative control %d: late writer saw %q, value %q; want the lost update", i, late, final)
		}
	}
}

func TestPausedHolderSQLite(t *testing.T) {
	t.Parallel()
	run(t, "sqlite:"+filepath.Join(t.TempDir(), "tenure.db"), 10, 200*time.Millisecond)
}

func TestPausedHolderPostgres(t *testing.T) {
	t.Parallel()
	run(t, testenv.SharedPostgres(t).NewDatabase(t), 10, 200*time.Millisecond)
}

func TestPausedHolderRedis(t *testing.T) {
	t.Parallel()
	run(t, "redis://"+testenv.SharedRedis(t).Addr(), 10, 200*time.Millisecond)
}

func TestPausedHolderEtcd(t *testing.T) {
	t.Parallel()
	eps := testenv.SharedEtcd(t).Endpoints()
	run(t, "etcd://"+strings.TrimPrefix(eps[0], "http://"), 5, time.Second)
}
