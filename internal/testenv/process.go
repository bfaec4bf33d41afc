package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long a server may take to become ready.
	startTimeout = 30 * time.Second
	// stopTimeout bounds how long a graceful stop may take before the
	// process group is killed.
	stopTimeout = 15 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 25 * time.Millisecond
	// portAttempts is how many times a server is started on a fresh port
	// when the previous one turned out to be taken.
	portAttempts = 4
	// logTailBytes is how much of a server log is shown on failure.
	logTailBytes = 8 << 10
)

// spawnReq asks the spawner goroutine to start a command.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// spawner starts every child process from one OS thread that lives as long
// as the test process. The kernel delivers the parent-death signal when the
// thread that forked the child exits, not the process, so forking from
// arbitrary goroutines could kill a server as soon as the Go runtime retires
// the thread it happened to run on.
func spawner() {
	runtime.LockOSThread() // never unlocked: the thread must outlive every child
	for r := range spawnCh {
		r.done <- r.cmd.Start()
	}
}

// startCmd starts cmd on the spawner thread.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- r
	return <-r.done
}

// procSpec describes how to run one server process.
type procSpec struct {
	name    string              // human-readable name used in messages
	bin     string              // absolute path of the binary
	args    []string            // arguments, without the binary
	dir     string              // working directory
	logPath string              // file receiving stdout and stderr
	cred    *syscall.Credential // run as this user, when non-nil
	env     []string            // environment; nil means the current one
}

// process is a running (or exited) server process.
type process struct {
	spec    procSpec
	cmd     *exec.Cmd
	logOff  int64         // size of the log before this process started
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess starts the process described by spec, with its output
// appended to spec.logPath, in a process group of its own and with SIGKILL as
// its parent-death signal.
func startProcess(spec procSpec) (*process, error) {
	logf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testenv: open %s log: %w", spec.name, err)
	}
	defer logf.Close()
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("testenv: open %s log: %w", spec.name, err)
	}
	fmt.Fprintf(logf, "=== testenv: %s starting at %s: %s %s\n",
		spec.name, time.Now().Format(time.RFC3339Nano), spec.bin, strings.Join(spec.args, " "))

	cmd := exec.Command(spec.bin, spec.args...)
	cmd.Dir = spec.dir
	cmd.Env = spec.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.cred,
	}
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("testenv: start %s (%s): %w", spec.name, spec.bin, err)
	}
	p := &process{spec: spec, cmd: cmd, logOff: off, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has terminated.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the process ended; it must only be called after
// the process has exited.
func (p *process) exitError() error {
	<-p.done
	if p.waitErr == nil {
		return fmt.Errorf("testenv: %s exited unexpectedly with status 0", p.spec.name)
	}
	return fmt.Errorf("testenv: %s exited unexpectedly: %w", p.spec.name, p.waitErr)
}

// signalAll sends sig to the process, its process group and every
// descendant of the process, whichever group it has moved to (postgres
// backends, for one, call setsid).
func (p *process) signalAll(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	pid := p.cmd.Process.Pid
	ds := descendants(pid)
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	for _, d := range ds {
		syscall.Kill(d, sig)
	}
	return err
}

// descendants returns the pids of every descendant of pid, as found in
// /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: the fields
		// that matter come after its closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state, ppid, ...
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], n)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := children[queue[0]]
		queue = queue[1:]
		out = append(out, c...)
		queue = append(queue, c...)
	}
	return out
}

// stop asks the process to exit with sig (waking it up first, in case it is
// paused), waits for it for up to stopTimeout and then kills it. It returns
// once the process has been reaped, with an error if it had to be killed.
func (p *process) stop(sig syscall.Signal) error {
	if !p.stopWithin(sig, stopTimeout) {
		return fmt.Errorf("testenv: %s did not stop within %v of %v; killed it", p.spec.name, stopTimeout, sig)
	}
	return nil
}

// stopWithin asks the process to exit with sig (waking it up first, in
// case it is paused) and kills it if it is still running after grace. It
// returns once the process has been reaped, reporting whether it exited
// without being killed.
func (p *process) stopWithin(sig syscall.Signal, grace time.Duration) bool {
	if p.exited() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // stragglers of the group, if any
		return true
	}
	// Signal the main process only: postgres, for one, relays shutdown
	// requests to its children itself, and sending SIGINT to a backend
	// cancels its query instead.
	p.cmd.Process.Signal(sig)
	p.signalAll(syscall.SIGCONT)
	select {
	case <-p.done:
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // children left behind, if any
		return true
	case <-time.After(grace):
	}
	p.kill()
	return false
}

// kill kills the process, its group and its descendants and waits for the
// process to be reaped.
func (p *process) kill() {
	p.signalAll(syscall.SIGKILL)
	<-p.done
}

// logSince returns what the process wrote to its log since it started.
func (p *process) logSince() string {
	b, err := os.ReadFile(p.spec.logPath)
	if err != nil || int64(len(b)) < p.logOff {
		return ""
	}
	return string(b[p.logOff:])
}

// portClash reports whether the process failed because its port was taken.
func (p *process) portClash() bool {
	return p.exited() && strings.Contains(strings.ToLower(p.logSince()), "address already in use")
}

// waitReady polls check until it succeeds, the process exits or
// startTimeout passes.
func (p *process) waitReady(check func(ctx context.Context) error) error {
	return waitUntil(p.spec.name, startTimeout, []*process{p}, check)
}

// waitUntil polls check until it succeeds, one of procs exits or timeout
// passes. Each probe gets a context bounded by the overall deadline, and
// cancelled as soon as one of procs exits, so that a probe stuck on a port
// someone else owns does not delay the verdict.
func waitUntil(what string, timeout time.Duration, procs []*process, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range procs {
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	exited := func() *process {
		for _, p := range procs {
			if p.exited() {
				return p
			}
		}
		return nil
	}
	var last error
	for {
		if p := exited(); p != nil {
			return fmt.Errorf("%w before becoming ready (last probe: %v)", p.exitError(), last)
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(pctx)
		pcancel()
		if p := exited(); p != nil {
			// Whatever answered was not this process.
			return fmt.Errorf("%w before becoming ready (last probe: %v)", p.exitError(), last)
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %s not ready after %v: %v", what, timeout, last)
		case <-time.After(pollInterval):
		}
	}
}

// logTail returns the last logTailBytes of the file at path.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	off := st.Size() - logTailBytes
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		return "[...]\n" + string(b)
	}
	return string(b)
}

// logTails writes the tail of every log in paths to t.
func logTails(t testing.TB, name string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		t.Logf("testenv: tail of %s log %s:\n%s", name, p, logTail(p))
	}
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// portSource proposes a port for freePort; tests replace it to provoke
// port clashes.
var portSource = func() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freePort returns a loopback TCP port that was free a moment ago and has
// not been handed out before by this process. The caller must be ready for
// another process taking it in the meantime.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		port, err := portSource()
		if err != nil {
			return 0, fmt.Errorf("testenv: find a free port: %w", err)
		}
		if !ports[port] {
			ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("testenv: find a free port: no unused port after 100 tries")
}

// makeTempDir creates a private temporary directory for one server.
func makeTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", "tenure-"+prefix+"-")
	if err != nil {
		return "", fmt.Errorf("testenv: create temp dir: %w", err)
	}
	return dir, nil
}

// The stop functions of the servers shared by all tests of the process,
// in start order.
var (
	sharedMu    sync.Mutex
	sharedStops []func() error
)

// registerShared records stop to be called by Main.
func registerShared(stop func() error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	sharedStops = append(sharedStops, stop)
}

// stopShared stops every shared server, newest first, and returns the
// errors it met.
func stopShared() []error {
	sharedMu.Lock()
	stops := sharedStops
	sharedStops = nil
	sharedMu.Unlock()
	var errs []error
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// lifecycle is the Stop, Start and Restart that PostgresServer and
// RedisServer share: one process at a time, started and stopped under mu,
// and the server's log shown when either fails. Each server sets name,
// logPath, launch and halt when it is made.
type lifecycle struct {
	mu      sync.Mutex
	proc    *process // nil while stopped
	name    string   // the binary, in messages
	logPath string
	launch  func() error // starts the process and waits until it serves; mu held
	halt    func() error // stops the process and sets proc to nil; mu held
}

// Stop shuts the server down gracefully (PostgreSQL in fast mode: open
// transactions are rolled back, connections closed; Redis with SIGTERM)
// and waits for it to exit. Data is kept (Redis: only with Persist).
// Stopping a stopped server does nothing.
func (l *lifecycle) Stop(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.halt(); err != nil {
		logTails(t, l.name, l.logPath)
		t.Fatalf("%v", err)
	}
}

// Start starts a stopped server again on the same port with the same data
// and waits until it serves. Starting a running server does nothing.
func (l *lifecycle) Start(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc != nil {
		return
	}
	if err := l.launch(); err != nil {
		logTails(t, l.name, l.logPath)
		t.Fatalf("testenv: restart %s: %v", l.name, err)
	}
}

// Restart stops and starts the server, keeping its port and data.
func (l *lifecycle) Restart(t testing.TB) {
	t.Helper()
	l.Stop(t)
	l.Start(t)
}

// server is what each kind of test server offers to the test that owns it.
type server interface {
	destroy() error
	logFiles() []string
}

// forTest hands s, just made with err, to the test t that owns it: when
// err says it did not start, t fails with the server's logs and s is
// removed; otherwise s is removed when t ends, its logs (named name)
// shown first if t failed.
func forTest[S server](t testing.TB, name string, s S, err error) S {
	t.Helper()
	if err != nil {
		defer s.destroy()
		failStart(t, err, s.logFiles()...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, name, s.logFiles()...)
		}
		if err := s.destroy(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return s
}

// stopProc stops *pp, if it runs, with sig and waits for it; *pp is nil
// after.
func stopProc(pp **process, sig syscall.Signal) error {
	p := *pp
	if p == nil {
		return nil
	}
	*pp = nil
	return p.stop(sig)
}

// destroyDir runs stop holding mu, then removes dir (when set): a server's
// end of life.
func destroyDir(mu *sync.Mutex, stop func() error, dir string) error {
	mu.Lock()
	defer mu.Unlock()
	err := stop()
	if dir == "" {
		return err
	}
	if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// sharedServer is what a server shared by the tests of a process needs.
type sharedServer interface {
	destroy() error
	logFiles() []string
}

// shared holds one server shared by all tests of the process, started by
// the first get and stopped by [Main].
type shared[S sharedServer] struct {
	mu     sync.Mutex
	server S
	up     bool
}

// get returns the shared server, starting it with start on first use. On
// a test's failure it shows the tail of the server's logs, labelled name.
func (sh *shared[S]) get(t testing.TB, name string, start func() (S, error)) S {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.up {
		s, err := start()
		if err != nil {
			defer s.destroy()
			failStart(t, err, s.logFiles()...)
		}
		sh.server, sh.up = s, true
		registerShared(func() error {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			var none S
			sh.server, sh.up = none, false
			return s.destroy()
		})
	}
	s := sh.server
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, name, s.logFiles()...)
		}
	})
	return s
}
