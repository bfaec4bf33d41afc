package proof

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartedStore is a store server started by [StartStore] for a run: the
// command owns it, so it may kill and restart it (Faults.Restart).
type StartedStore struct {
	// URL is the --store value that reaches it.
	URL string
	// Detail describes the server for reports.
	Detail string

	bin, dir string
	port     int
	args     []string    // extra redis-server arguments
	repl     *replicated // with StartOptions.Replica
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartStore starts a server of the given kind on a free loopback port, in
// a new directory under dir ("" for the system's temporary directory).
// Only "redis" is supported: redis-server from PATH, with the append-only
// file synced on every write (appendfsync always), so that a restart keeps
// every acknowledged write. Close stops it and removes its directory.
func StartStore(ctx context.Context, kind, dir string) (*StartedStore, error) {
	if kind != "redis" {
		return nil, fmt.Errorf("%w: cannot start a %q store (only redis)", ErrInvalid, kind)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("proof: start a Redis server: %w", err)
	}
	s, err := startRedis(ctx, bin, dir)
	if err != nil {
		return nil, err
	}
	s.Detail = "redis-server started by tenure proof on " + s.addr() + " (appendfsync always)"
	return s, nil
}

func (s *StartedStore) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
		"--save", "", "--appendonly", "yes", "--appendfsync", "always"}, s.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proof: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	addr := "127.0.0.1:" + strconv.Itoa(s.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := redisReady(addr, cmd.Process.Pid); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			s.killLocked()
			return fmt.Errorf("proof: redis-server on %s did not answer: %w", addr, err)
		}
		select {
		case <-done:
			return fmt.Errorf("%w (see %s)", errExitedAtStart, filepath.Join(s.dir, "redis.log"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errExitedAtStart reports a redis-server that exited before it answered,
// as it does when its port was taken.
var errExitedAtStart = errors.New("proof: redis-server exited at start")

// redisReady reports whether the redis-server with process ID pid answers
// on addr: INFO server answers (not LOADING while it replays its
// append-only file) and names that process. The port was free when it was
// picked, not reserved, so another process's server may have taken it
// since; that one must not pass for ours.
func redisReady(addr string, pid int) error {
	info, err := redisCall(addr, "INFO", "server")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
		return fmt.Errorf("another server (not process %d) answers on %s", pid, addr)
	}
	return nil
}

func (s *StartedStore) killLocked() {
	if s.cmd == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Restart kills the server (SIGKILL, as a crash would) and starts it again
// on the same port and directory; it returns once it answers. It fits
// Faults.Restart.
func (s *StartedStore) Restart(ctx context.Context) error {
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	return s.start(ctx)
}

// Close stops the server (and its replica) and removes its directory.
func (s *StartedStore) Close() error {
	if r := s.repl; r != nil {
		r.front.Close()
		r.link.Close()
		r.replica.Close()
	}
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	return os.RemoveAll(s.dir)
}
