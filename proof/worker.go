package proof

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lab"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// WorkerEnv is the environment variable that makes a re-executed binary a
// proof worker: it holds the worker's parameters as JSON.
const WorkerEnv = "TENURE_PROOF_WORKER"

// IsWorker reports whether this process was started by [Run] as a worker.
// A binary that runs proofs calls it first thing in main (or TestMain) and,
// when it is true, exits with [WorkerMain]'s code.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerMain runs the worker this process was started as: it opens the
// store, runs the workload's guarded and control loops until its standard
// input closes, and writes its history to standard output, one JSON event
// per line. It returns the process's exit code.
func WorkerMain() int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "proof worker: bad parameters:", err)
		return 2
	}
	wl := lookup(spec.Workload)
	if wl == nil {
		fmt.Fprintln(os.Stderr, "proof worker: unknown workload", spec.Workload)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the coordinator closes stdin to stop the worker
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	// Unbuffered: every event is one write, in the pipe before the next
	// step, so a killed worker loses nothing it completed.
	// The store may be out of reach for a while (a cut proxy, a restart):
	// keep trying, as a service would, until told to stop.
	var w *workerEnv
	for {
		var err error
		if w, err = openWorker(ctx, spec, jsonSink(os.Stdout)); err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0
		}
		if time.Since(time.Unix(0, spec.Start)) > time.Minute {
			fmt.Fprintln(os.Stderr, "proof worker:", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer w.close()
	if err := wl.worker(ctx, w); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "proof worker:", err)
		return 1
	}
	return 0
}

// workerSpec is what a worker is told.
type workerSpec struct {
	Workload string        `json:"workload"`
	Store    string        `json:"store"`
	Prefix   string        `json:"prefix"`
	Ledger   string        `json:"ledger"`
	Proc     string        `json:"proc"`
	Index    int           `json:"index"`
	TTL      time.Duration `json:"ttl"`
	Think    time.Duration `json:"think"`
	Keys     int           `json:"keys,omitempty"` // counters per mode (lease-counter)
	Start    int64         `json:"start"`          // the run's start, Unix nanoseconds
	End      int64         `json:"end"`            // the end of the faults, Unix nanoseconds
}

// workerEnv is what a workload's loops get: the store, the shared ledger
// (a SQLite file that is the business database of stores that are not
// one), a recorder and the pause gate.
type workerEnv struct {
	spec   workerSpec
	env    *lab.Env
	kind   storeurl.Kind
	pg     *pgxpool.Pool
	ledger *sqlitestore.Store
	rec    *Recorder
	gate   *gate
	closer []func()
}

func (w *workerEnv) close() {
	for i := len(w.closer) - 1; i >= 0; i-- {
		w.closer[i]()
	}
}

// openWorker opens the store and the ledger named by spec.
func openWorker(ctx context.Context, spec workerSpec, sink func(Event)) (*workerEnv, error) {
	u, err := storeurl.Parse(spec.Store)
	if err != nil {
		return nil, err
	}
	envs, err := lab.OpenPrefix(ctx, spec.Store, spec.Prefix)
	if err != nil {
		return nil, err
	}
	w := &workerEnv{spec: spec, env: envs[0], kind: u.Kind, rec: newRecorder(spec.Proc, sink), gate: newGate()}
	w.closer = append(w.closer, func() { envs[0].Close() })
	if err := w.openExtras(ctx, u); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// openExtras opens the ledger and, for PostgreSQL, a pool of our own.
func (w *workerEnv) openExtras(ctx context.Context, u storeurl.Spec) error {
	if u.Kind == storeurl.Postgres {
		pool, err := pgxpool.New(ctx, u.URL)
		if err != nil {
			return fmt.Errorf("postgres %s: %w", u.Redacted(), err)
		}
		w.pg = pool
		w.closer = append(w.closer, pool.Close)
	}
	if u.Kind == storeurl.SQLite && u.Path == w.spec.Ledger {
		w.ledger = w.env.SQLite
		return nil
	}
	led, err := sqlitestore.Open(ctx, w.spec.Ledger, nil)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	w.ledger = led
	w.closer = append(w.closer, func() { led.Close() })
	return nil
}

// gate is how in-process workers act out a pause: a loop waits at the gate
// between its steps while the nemesis holds it closed. Worker processes
// are paused for real (SIGSTOP) and never close their gate.
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // nil when open
}

func newGate() *gate { return &gate{} }

func (g *gate) pause() {
	g.mu.Lock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
	g.mu.Unlock()
}

// wait blocks while the gate is closed.
func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	c := g.closed
	g.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case <-c:
	case <-ctx.Done():
	}
}

// sleep waits for d (or ctx), then at the gate.
func (w *workerEnv) sleep(ctx context.Context, d time.Duration) {
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	w.gate.wait(ctx)
}

// member is one worker as the coordinator sees it: a process, or a set of
// goroutines in this process (memory store).
type member struct {
	name        string
	index       int
	incarnation int
	spec        workerSpec

	// process workers
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// in-process workers
	cancel context.CancelFunc
	g      *gate

	done   chan struct{}
	paused bool
	dead   bool
	stderr *tailBuffer
}

// tailBuffer keeps the last few KiB a worker wrote to stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// startProcess re-executes the binary as a worker.
func startProcess(exe string, args []string, spec workerSpec, sink func(Event)) (*member, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	m := &member{name: spec.Proc, index: spec.Index, spec: spec, cmd: cmd, done: make(chan struct{}), stderr: &tailBuffer{}}
	cmd.Stderr = m.stderr
	if m.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				sink(e)
			}
		}
		cmd.Wait()
		close(m.done)
	}()
	return m, nil
}

// startInProcess runs the workload's loops as goroutines on a shared
// workerEnv (the memory store, which lives in this process).
func startInProcess(wl *workload, base *workerEnv, spec workerSpec, sink func(Event)) *member {
	ctx, cancel := context.WithCancel(context.Background())
	g := newGate()
	w := *base
	w.spec = spec
	w.rec = newRecorder(spec.Proc, sink)
	w.gate = g
	w.closer = nil
	m := &member{name: spec.Proc, index: spec.Index, spec: spec, cancel: cancel, g: g, done: make(chan struct{}), stderr: &tailBuffer{}}
	go func() {
		defer close(m.done)
		if err := wl.worker(ctx, &w); err != nil && ctx.Err() == nil {
			fmt.Fprintln(m.stderr, err)
		}
	}()
	return m
}

func (m *member) pause() error {
	if m.dead || m.paused {
		return nil
	}
	m.paused = true
	if m.g != nil {
		m.g.pause()
		return nil
	}
	return ignoreDone(m.cmd.Process.Signal(syscall.SIGSTOP))
}

func (m *member) resume() error {
	if m.dead || !m.paused {
		return nil
	}
	m.paused = false
	if m.g != nil {
		m.g.resume()
		return nil
	}
	return ignoreDone(m.cmd.Process.Signal(syscall.SIGCONT))
}

// ignoreDone: a worker that has exited on its own (its output says why)
// cannot be paused or resumed, and that is no fault of the run.
func ignoreDone(err error) error {
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// kill ends a worker process at once (SIGKILL): whatever it had in flight
// stays without a completion, that is, unknown.
func (m *member) kill() error {
	if m.dead || m.cmd == nil {
		return nil
	}
	m.dead = true
	err := m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	return ignoreDone(err)
}

// stop asks the worker to finish and waits up to grace before killing it.
func (m *member) stop(grace time.Duration) {
	if m.dead {
		return
	}
	m.resume()
	if m.cancel != nil {
		m.cancel()
		m.g.resume()
	} else {
		m.stdin.Close()
	}
	select {
	case <-m.done:
	case <-time.After(grace):
		if m.cmd != nil {
			m.cmd.Process.Signal(syscall.SIGKILL)
		}
		<-m.done
	}
	m.dead = true
}
