package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PostgresStandby makes a streaming standby of primary: a base backup
// (pg_basebackup -X stream -R) taken through addr (the primary's address,
// or a [Proxy] in front of it, which the standby then streams through as
// well), started on a port of its own, and waits until the primary lists
// it as streaming. It has primary's durability settings and is stopped,
// its data removed, when the test ends. Replication is asynchronous unless
// the primary's synchronous_standby_names names it.
func PostgresStandby(t testing.TB, primary *PostgresServer, addr string) *PostgresServer {
	t.Helper()
	initdb, pg := requirePostgres(t)
	basebackup := filepath.Join(filepath.Dir(pg), "pg_basebackup")
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		if p := filepath.Join(filepath.Dir(real), "pg_basebackup"); fileExists(p) {
			basebackup = p
		}
	}
	if !fileExists(basebackup) {
		basebackup = RequireBinary(t, "pg_basebackup")
	}
	s, err := newStandby(basebackup, pg, primary, addr)
	if err != nil {
		defer s.destroy()
		failStart(t, err, s.logFiles()...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, "postgres standby", s.logPath)
		}
		if err := s.destroy(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return s
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func newStandby(basebackup, postgresBin string, primary *PostgresServer, addr string) (*PostgresServer, error) {
	s := &PostgresServer{postgresBin: postgresBin, env: postgresEnv(), durable: primary.durable, cred: primary.cred}
	s.lifecycle = s.newLifecycle()
	var err error
	if s.base, err = postgresTempDir(s.cred); err != nil {
		return s, err
	}
	s.dataDir = filepath.Join(s.base, "data")
	s.logPath = filepath.Join(s.base, "postgres.log")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return s, fmt.Errorf("testenv: standby of %s: %w", addr, err)
	}
	p, err := startProcess(procSpec{
		name:    "pg_basebackup",
		bin:     basebackup,
		args:    []string{"-D", s.dataDir, "-h", host, "-p", port, "-U", "postgres", "-X", "stream", "-R", "-c", "fast", "--no-sync"},
		dir:     s.base,
		logPath: s.logPath,
		cred:    s.cred,
		env:     s.env,
	})
	if err != nil {
		return s, err
	}
	select {
	case <-p.done:
	case <-time.After(startTimeout):
		p.kill()
		return s, fmt.Errorf("testenv: pg_basebackup did not finish within %v", startTimeout)
	}
	if p.waitErr != nil {
		return s, fmt.Errorf("testenv: pg_basebackup failed: %w", p.waitErr)
	}
	s.mu.Lock()
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			s.mu.Unlock()
			return s, err
		}
		p, err := s.startLocked()
		if err == nil {
			break
		}
		if p == nil || !p.portClash() || attempt == portAttempts {
			s.mu.Unlock()
			return s, err
		}
	}
	s.mu.Unlock()
	err = waitUntil("standby "+s.Addr()+" streaming from "+primary.Addr(), startTimeout, nil, func(ctx context.Context) error {
		n, err := psql(ctx, primary.DSN("postgres"), `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`)
		if err != nil {
			return err
		}
		if n == "0" {
			return errors.New("no standby streaming yet")
		}
		return nil
	})
	return s, err
}

// Kill ends the server at once with SIGKILL (the postmaster and every
// backend), as a crash would. Killing a stopped server does nothing.
func (s *PostgresServer) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.kill()
	s.proc = nil
}

// Promote turns a standby into a primary (pg_promote) and waits until it
// accepts writes. It keeps the WAL it has received so far.
func (s *PostgresServer) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ok, err := psql(ctx, s.DSN("postgres"), `SELECT pg_promote(true, 60)`)
	if err != nil || ok != "t" {
		t.Fatalf("testenv: promote %s: %v (promoted %q)", s, err, ok)
	}
}

// WaitReplayed waits until standby has replayed everything primary had
// written when WaitReplayed was called (its WAL insert position: with
// synchronous_commit off a commit returns before its WAL is written).
func WaitReplayed(t testing.TB, primary, standby *PostgresServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	lsn, err := psql(ctx, primary.DSN("postgres"), `SELECT pg_current_wal_insert_lsn()::text`)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	err = waitUntil("standby "+standby.Addr()+" replayed "+lsn, startTimeout, nil, func(ctx context.Context) error {
		done, err := psql(ctx, standby.DSN("postgres"), `SELECT pg_last_wal_replay_lsn() >= '`+lsn+`'::pg_lsn`)
		if err != nil {
			return err
		}
		if done != "t" {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
}
