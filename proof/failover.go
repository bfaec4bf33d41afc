package proof

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tenurekit/tenure/internal/faultproxy"
)

// StartOptions configure [StartStoreWith].
type StartOptions struct {
	// Dir is where the server's directory is made ("" for the system's
	// temporary directory).
	Dir string
	// Replica also starts a replica of the server, for Faults.Failover
	// ([StartedStore.Failover]). The replica reaches the server through a
	// relay that the failover holds back (the replica stays connected and
	// keeps acknowledging, but receives nothing new), and the store's URL
	// is a relay in front of the server that the failover points at the
	// promoted replica, as Sentinel or a managed service moves a primary's
	// address.
	Replica bool
}

// StartStoreWith is [StartStore] with options.
func StartStoreWith(ctx context.Context, kind string, o StartOptions) (*StartedStore, error) {
	s, err := StartStore(ctx, kind, o.Dir)
	if err != nil || !o.Replica {
		return s, err
	}
	if err := s.addReplica(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// replicated is the replica of a started store and the relays around it.
type replicated struct {
	replica *StartedStore
	link    *faultproxy.Proxy // replica -> primary: the replication stream
	front   *faultproxy.Proxy // workers -> the current primary
	failed  bool              // the failover happened
}

func (s *StartedStore) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *StartedStore) addReplica(ctx context.Context) error {
	link, err := faultproxy.Start(s.addr())
	if err != nil {
		return err
	}
	_, linkPort, _ := net.SplitHostPort(link.Addr())
	r, err := startRedis(ctx, s.bin, filepath.Dir(s.dir), "--replicaof", "127.0.0.1", linkPort)
	if err != nil {
		link.Close()
		return err
	}
	front, err := faultproxy.Start(s.addr())
	if err != nil {
		link.Close()
		r.Close()
		return err
	}
	s.repl = &replicated{replica: r, link: link, front: front}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := redisCall(r.addr(), "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("proof: the replica on %s did not sync with %s: %v", r.addr(), s.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.URL = "redis://" + front.Addr()
	s.Detail = fmt.Sprintf("redis-server started by tenure proof on %s (appendfsync always) with a replica on %s; the store is reached through a relay on %s", s.addr(), r.addr(), front.Addr())
	return nil
}

// Failover fails the started store over to its replica, as a primary that
// dies while its replica lags: it holds back the replication stream, waits
// until the primary has written something the replica did not receive (at
// most five seconds), kills the primary (SIGKILL), promotes the replica
// (REPLICAOF NO ONE) and points the store's address at it. What the
// primary wrote meanwhile is lost, unless it was refused as unconfirmed:
// tenure reports a write done only once the replica confirmed it. It fits
// Faults.Failover and needs a store started with StartOptions.Replica; it
// fails over once.
func (s *StartedStore) Failover(ctx context.Context) error {
	if s.repl == nil {
		return fmt.Errorf("%w: the store was started without a replica", ErrInvalid)
	}
	if s.repl.failed {
		return errors.New("proof: the store failed over already")
	}
	s.repl.failed = true
	before, _ := replOffset(s.addr())
	s.repl.link.Hold()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if off, err := replOffset(s.addr()); err != nil || off > before {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	if _, err := redisCall(s.repl.replica.addr(), "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("proof: promote the replica: %w", err)
	}
	s.repl.link.Close()
	s.repl.front.SetUpstream(s.repl.replica.addr())
	return nil
}

// replOffset reads master_repl_offset from a server's INFO replication.
func replOffset(addr string) (int64, error) {
	info, err := redisCall(addr, "INFO", "replication")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("proof: INFO replication without master_repl_offset")
}

// startRedis starts a persistent redis-server with extra arguments on a
// free port in a new directory under dir. A port is free when it is
// picked, not reserved: if another process takes it first, the server
// exits at start, and the next try picks another port.
func startRedis(ctx context.Context, bin, dir string, args ...string) (*StartedStore, error) {
	d, err := os.MkdirTemp(dir, "tenure-proof-redis-")
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.RemoveAll(d)
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		s := &StartedStore{bin: bin, dir: d, port: port, args: args}
		s.URL = "redis://" + s.addr()
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errExitedAtStart) || try == 5 {
			os.RemoveAll(d)
			return nil, err
		}
	}
}

// redisCall sends one command and returns its reply as text (a bulk or
// simple string, or an integer).
func redisCall(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return "", errors.New(line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case len(line) > 0:
		return line[1:], nil
	}
	return "", errors.New("proof: empty reply")
}
