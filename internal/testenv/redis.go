package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisOptions configures a server started by [Redis]. The zero value (and
// a nil pointer) gives an in-memory server without any persistence.
type RedisOptions struct {
	// MaxMemory is passed as --maxmemory (for example "64mb") when non-empty.
	MaxMemory string
	// MaxMemoryPolicy is passed as --maxmemory-policy (for example
	// "allkeys-lru") when non-empty.
	MaxMemoryPolicy string
	// Persist turns on the append-only file with appendfsync always, so
	// that every acknowledged write survives a Stop/Start or Restart.
	// Without it the server runs with save "" and appendonly no and loses
	// all data when it stops.
	Persist bool
	// Args are extra command-line arguments appended last, in redis-server
	// syntax: []string{"--notify-keyspace-events", "KEA"}.
	Args []string
}

// RedisServer is a redis-server process listening on 127.0.0.1. Its port
// and data directory stay the same across Stop, Start and Restart. All
// methods are safe for concurrent use.
type RedisServer struct {
	bin     string
	dir     string
	opts    RedisOptions
	cluster bool // run with cluster-enabled yes

	lifecycle // mu guards the ports too
	port      int
	busPort   int // cluster bus port, when cluster is set
}

// Redis starts a fresh redis-server configured by o (which may be nil) and
// stops it, removing its data, when the test ends. It skips or fails the
// test as [RequireBinary] does when redis-server is not installed.
func Redis(t testing.TB, o *RedisOptions) *RedisServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server")
	s, err := newRedis(bin, o, false)
	return forTest(t, "redis-server", s, err)
}

// sharedRedis is started by the first call of SharedRedis.
var sharedRedis shared[*RedisServer]

// SharedRedis returns the redis-server shared by all tests of the process,
// starting it on first use. Tests must use keys of their own and must not
// stop, restart, pause or flush it. [Main] stops it.
func SharedRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server")
	return sharedRedis.get(t, "shared redis-server", func() (*RedisServer, error) { return newRedis(bin, nil, false) })
}

// failStart reports a server that could not be started: it shows the tail
// of its logs and fails the test.
func failStart(t testing.TB, err error, logs ...string) {
	t.Helper()
	for _, l := range logs {
		if _, serr := os.Stat(l); serr == nil {
			logTails(t, filepath.Base(l), l)
		}
	}
	t.Fatalf("%v", err)
}

// newRedis creates a data directory and starts a server in it on a free
// port, trying other ports if the chosen one turns out to be taken. On
// failure the returned server (never nil) still names its log file, and its
// directory is left in place so the log can be shown.
func newRedis(bin string, o *RedisOptions, cluster bool) (*RedisServer, error) {
	s := &RedisServer{bin: bin, cluster: cluster}
	// Stop is a SIGTERM (data is kept on disk only with Persist); Start
	// comes back on the same port and in the same directory once the
	// server answers PING.
	s.lifecycle = lifecycle{name: "redis-server", launch: func() error { _, err := s.startLocked(); return err }, halt: s.stopLocked}
	if o != nil {
		s.opts = *o
		s.opts.Args = append([]string(nil), o.Args...)
	}
	dir, err := makeTempDir("redis")
	if err != nil {
		return s, err
	}
	s.dir = dir
	s.logPath = filepath.Join(dir, "redis.log")
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return s, err
		}
		if cluster {
			if s.busPort, err = freePort(); err != nil {
				return s, err
			}
		}
		p, err := s.startLocked()
		if err == nil {
			return s, nil
		}
		if p == nil || !p.portClash() || attempt == portAttempts {
			return s, err
		}
	}
}

// logFiles lists the log files of s, if it got as far as having one.
func (s *RedisServer) logFiles() []string {
	if s == nil || s.logPath == "" {
		return nil
	}
	return []string{s.logPath}
}

// argv returns the redis-server command line.
func (s *RedisServer) argv() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", "",
	}
	if s.opts.Persist {
		args = append(args, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if s.opts.MaxMemory != "" {
		args = append(args, "--maxmemory", s.opts.MaxMemory)
	}
	if s.opts.MaxMemoryPolicy != "" {
		args = append(args, "--maxmemory-policy", s.opts.MaxMemoryPolicy)
	}
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-node-timeout", "5000",
		)
	}
	return append(args, s.opts.Args...)
}

// startLocked starts the process and waits until it answers PING. On
// failure the process is killed and returned (when it was started at all)
// so the caller can tell a port clash from other failures.
func (s *RedisServer) startLocked() (*process, error) {
	p, err := startProcess(procSpec{
		name:    "redis-server on " + s.addrLocked(),
		bin:     s.bin,
		args:    s.argv(),
		dir:     s.dir,
		logPath: s.logPath,
	})
	if err != nil {
		return nil, err
	}
	addr := s.addrLocked()
	if err := p.waitReady(func(ctx context.Context) error { return redisReady(ctx, addr, p.cmd.Process.Pid) }); err != nil {
		p.kill()
		return p, err
	}
	s.proc = p
	return p, nil
}

// stopLocked shuts the server down with SIGTERM and waits for it to exit.
func (s *RedisServer) stopLocked() error { return stopProc(&s.proc, syscall.SIGTERM) }

// destroy stops the server and removes its directory.
func (s *RedisServer) destroy() error { return destroyDir(&s.mu, s.stopLocked, s.dir) }

func (s *RedisServer) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Addr returns the server's address as host:port.
func (s *RedisServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrLocked()
}

// Dir returns the server's data directory, which also holds its log file
// redis.log.
func (s *RedisServer) Dir() string { return s.dir }

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered until [RedisServer.Resume].
func (s *RedisServer) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume continues a server frozen by [RedisServer.Pause].
func (s *RedisServer) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *RedisServer) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("testenv: redis-server on %s is not running", s.addrLocked())
	}
	if err := s.proc.signalAll(sig); err != nil {
		t.Fatalf("testenv: send %v to redis-server: %v", sig, err)
	}
}

// String returns a description of the server for messages.
func (s *RedisServer) String() string { return fmt.Sprintf("redis-server %s", s.Addr()) }

// RedisReplica starts a fresh redis-server that replicates primary
// (--replicaof), with primary's options, and waits until its link to the
// primary is up and the initial sync is done. It is stopped, its data
// removed, when the test ends. Replication is asynchronous: a write
// acknowledged by the primary may not have reached the replica yet.
func RedisReplica(t testing.TB, primary *RedisServer) *RedisServer {
	t.Helper()
	return RedisReplicaVia(t, primary, primary.Addr())
}

// RedisReplicaVia is RedisReplica for a replica that reaches primary at
// addr (host:port), a [Proxy] in front of it for example.
func RedisReplicaVia(t testing.TB, primary *RedisServer, addr string) *RedisServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server")
	o := primary.opts
	host, port, _ := net.SplitHostPort(addr)
	o.Args = append(append([]string(nil), o.Args...), "--replicaof", host, port)
	s, err := newRedis(bin, &o, false)
	if err != nil {
		defer s.destroy()
		failStart(t, err, s.logFiles()...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, "redis-server replica", s.logPath)
		}
		if err := s.destroy(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	if err := waitSynced(s, primary); err != nil {
		logTails(t, "redis-server replica", s.logPath)
		t.Fatalf("testenv: %v", err)
	}
	return s
}

// waitSynced waits until replica's link to its primary is up, its initial
// sync is done, and primary lists it as online.
func waitSynced(replica, primary *RedisServer) error {
	return waitUntil("replica "+replica.Addr()+" in sync with "+primary.Addr(), startTimeout, nil, func(ctx context.Context) error {
		info, err := respCall(ctx, replica.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
			return fmt.Errorf("not in sync yet")
		}
		pinfo, err := respCall(ctx, primary.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(pinfo, "state=online") {
			return fmt.Errorf("the primary does not list the replica as online yet")
		}
		return nil
	})
}

// Kill ends the server at once with SIGKILL, as a crash would, and waits
// for it to be reaped. Killing a stopped server does nothing.
func (s *RedisServer) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.kill()
	s.proc = nil
}

// Promote turns a replica into a primary (REPLICAOF NO ONE): it keeps the
// data it has replicated so far and accepts writes. A later Start or
// Restart keeps it a primary.
func (s *RedisServer) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := respCall(ctx, s.Addr(), "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatalf("testenv: promote %s: %v", s, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.opts.Args, "--replicaof"); i >= 0 {
		s.opts.Args = slices.Delete(slices.Clone(s.opts.Args), i, min(i+3, len(s.opts.Args)))
	}
}
