package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// PostgresServer is a PostgreSQL cluster (one postmaster and its data
// directory) listening on 127.0.0.1 only, with trust authentication for the
// superuser "postgres" and its Unix socket in its own directory. It runs
// with fsync off: it is fast and survives Stop/Start, but not a machine
// crash. Its port and data directory stay the same across Stop, Start and
// Restart. All methods are safe for concurrent use.
type PostgresServer struct {
	postgresBin string
	base        string // private temp dir: log, socket and data/
	dataDir     string
	cred        *syscall.Credential // run as this user (set when root)
	env         []string
	durable     bool

	lifecycle // mu guards port too
	port      int
}

// dbSeq numbers the databases made by NewDatabase in this process.
var dbSeq atomic.Int64

// PostgresOptions configures a server started by [PostgresWith]. The zero
// value (and a nil pointer) is the fast server [Postgres] starts.
type PostgresOptions struct {
	// Durable runs the server with fsync, synchronous_commit and
	// full_page_writes on, so that every acknowledged commit survives
	// [PostgresServer.StopImmediate] (and a crash). Without it they are
	// off: faster, and a commit acknowledged just before an immediate stop
	// may be lost.
	Durable bool
}

// Postgres initializes and starts a fresh PostgreSQL cluster and stops it,
// removing its data, when the test ends. It skips or fails the test as
// [RequireBinary] does when initdb or postgres is not installed.
func Postgres(t testing.TB) *PostgresServer {
	t.Helper()
	return PostgresWith(t, nil)
}

// PostgresWith is [Postgres] with options; o may be nil.
func PostgresWith(t testing.TB, o *PostgresOptions) *PostgresServer {
	t.Helper()
	initdb, pg := requirePostgres(t)
	s, err := newPostgres(initdb, pg, o != nil && o.Durable)
	return forTest(t, "postgres", s, err)
}

// sharedPostgres is started by the first call of SharedPostgres.
var sharedPostgres shared[*PostgresServer]

// SharedPostgres returns the PostgreSQL cluster shared by all tests of the
// process, starting it on first use. Tests should work in a database of
// their own (see [PostgresServer.NewDatabase]) and must not stop, restart or
// pause it. [Main] stops it.
func SharedPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	initdb, pg := requirePostgres(t)
	return sharedPostgres.get(t, "shared postgres", func() (*PostgresServer, error) { return newPostgres(initdb, pg, false) })
}

// requirePostgres finds initdb and a postgres binary of the same
// installation.
func requirePostgres(t testing.TB) (initdb, postgres string) {
	t.Helper()
	initdb = RequireBinary(t, "initdb")
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		p := filepath.Join(filepath.Dir(real), "postgres")
		if _, err := os.Stat(p); err == nil {
			return initdb, p
		}
	}
	return initdb, RequireBinary(t, "postgres")
}

// newPostgres creates a private directory, runs initdb in it and starts
// the server on a free port. On failure the returned server (never nil)
// still names its log file.
func newPostgres(initdbBin, postgresBin string, durable bool) (*PostgresServer, error) {
	s := &PostgresServer{postgresBin: postgresBin, env: postgresEnv(), durable: durable}
	s.lifecycle = s.newLifecycle()
	cred, err := postgresCredential()
	if err != nil {
		return s, err
	}
	s.cred = cred
	if s.base, err = postgresTempDir(cred); err != nil {
		return s, err
	}
	s.dataDir = filepath.Join(s.base, "data")
	s.logPath = filepath.Join(s.base, "postgres.log")

	p, err := startProcess(procSpec{
		name: "initdb",
		bin:  initdbBin,
		args: []string{
			"-D", s.dataDir, "-A", "trust", "-U", "postgres",
			"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
		},
		dir:     s.base,
		logPath: s.logPath,
		cred:    cred,
		env:     s.env,
	})
	if err != nil {
		return s, err
	}
	select {
	case <-p.done:
	case <-time.After(startTimeout):
		p.kill()
		return s, fmt.Errorf("testenv: initdb did not finish within %v", startTimeout)
	}
	if p.waitErr != nil {
		return s, fmt.Errorf("testenv: initdb failed: %w", p.waitErr)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return s, err
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

// postgresCredential returns the credential of the "postgres" user when
// running as root, where initdb and postgres refuse to run, and nil
// otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testenv: PostgreSQL cannot run as root and there is no postgres user to run it as (%w); install it with `apt-get install postgresql`", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testenv: postgres user: bad uid %q", u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testenv: postgres user: bad gid %q", u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// postgresTempDir creates the server's private directory, owned by the
// user in cred when set. Every parent of that directory must be searchable
// by that user, so the system temp dir is used only when it is; /tmp
// otherwise.
func postgresTempDir(cred *syscall.Credential) (string, error) {
	parent := os.TempDir()
	if cred != nil && !searchableByOthers(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "tenure-postgres-")
	if err != nil {
		return "", fmt.Errorf("testenv: create temp dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("testenv: chown %s to the postgres user: %w", dir, err)
		}
	}
	return dir, nil
}

// searchableByOthers reports whether dir and all its parents have the
// search (x) permission for others.
func searchableByOthers(dir string) bool {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// postgresEnv is the environment of initdb and postgres: the current one
// without libpq and locale settings, plus the C locale.
func postgresEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// logFiles lists the log file of s, if it got as far as having one.
func (s *PostgresServer) logFiles() []string {
	if s == nil || s.logPath == "" {
		return nil
	}
	return []string{s.logPath}
}

// startLocked starts the postmaster and waits until it accepts a
// connection. On failure the process is killed and returned (when it was
// started at all) so the caller can tell a port clash from other failures.
func (s *PostgresServer) startLocked() (*process, error) {
	sync := "off"
	if s.durable {
		sync = "on"
	}
	p, err := startProcess(procSpec{
		name: "postgres on " + s.addrLocked(),
		bin:  s.postgresBin,
		args: []string{
			"-D", s.dataDir,
			"-p", strconv.Itoa(s.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + s.base,
			"-c", "fsync=" + sync,
			"-c", "synchronous_commit=" + sync,
			"-c", "full_page_writes=" + sync,
			"-c", "logging_collector=off",
			"-c", "max_connections=200",
		},
		dir:     s.base,
		logPath: s.logPath,
		cred:    s.cred,
		env:     s.env,
	})
	if err != nil {
		return nil, err
	}
	dsn := s.dsnLocked("postgres")
	err = p.waitReady(func(ctx context.Context) error {
		// Make sure this is our server, not another one that got hold of
		// the port.
		dir, err := psql(ctx, dsn, "SHOW data_directory")
		if err != nil {
			return err
		}
		if dir != s.dataDir {
			return fmt.Errorf("%s is served by the cluster in %s, not %s", s.addrLocked(), dir, s.dataDir)
		}
		return nil
	})
	if err != nil {
		p.kill()
		return p, err
	}
	s.proc = p
	return p, nil
}

// newLifecycle is s's Stop, Start and Restart: a fast shutdown (SIGINT:
// open transactions are rolled back, connections closed; data is kept),
// and a start on the same port with the same data directory that waits
// until the server accepts connections.
func (s *PostgresServer) newLifecycle() lifecycle {
	return lifecycle{name: "postgres", launch: func() error { _, err := s.startLocked(); return err }, halt: s.stopLocked}
}

// stopLocked shuts the server down in fast mode (SIGINT) and waits for it.
func (s *PostgresServer) stopLocked() error { return stopProc(&s.proc, syscall.SIGINT) }

// destroy stops the server and removes its directory.
func (s *PostgresServer) destroy() error { return destroyDir(&s.mu, s.stopLocked, s.base) }

func (s *PostgresServer) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

func (s *PostgresServer) dsnLocked(db string) string {
	return "postgres://postgres@" + s.addrLocked() + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// Addr returns the server's TCP address as host:port.
func (s *PostgresServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrLocked()
}

// DSN returns the URL of database db for the superuser, over TCP without
// TLS: postgres://postgres@127.0.0.1:PORT/db?sslmode=disable.
func (s *PostgresServer) DSN(db string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dsnLocked(db)
}

// Dir returns the server's private directory, which holds the data
// directory data/, the log file postgres.log and the Unix socket.
func (s *PostgresServer) Dir() string { return s.base }

// NewDatabase creates a database with a name unique within the process,
// derived from the test's name, and returns its DSN. The database is
// dropped, closing any connection still using it, when the test ends.
func (s *PostgresServer) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t_%s_%d", sanitize(t.Name(), 40), dbSeq.Add(1))
	ident := `"` + name + `"` // sanitize leaves [a-z0-9_] only
	if err := s.admin("CREATE DATABASE " + ident); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		running := s.proc != nil
		s.mu.Unlock()
		if !running {
			return // the cluster is gone, or its owner will remove it
		}
		if err := s.admin("DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// admin runs one statement in the postgres database.
func (s *PostgresServer) admin(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := psql(ctx, s.DSN("postgres"), sql)
	return err
}

// psql runs sql with the psql binary against dsn and returns the trimmed
// output; an error carries psql's message.
func psql(ctx context.Context, dsn, sql string) (string, error) {
	bin, err := lookBinary("psql")
	if err != nil {
		return "", fmt.Errorf("psql: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("psql %q: %s", sql, msg)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// StopImmediate shuts the server down in immediate mode, as `pg_ctl stop
// -m immediate` does (SIGQUIT to the postmaster): every backend quits at
// once without a checkpoint, and the next Start runs crash recovery from
// the write-ahead log. Only a [PostgresOptions.Durable] server is sure to
// keep every acknowledged commit across it. Stopping a stopped server does
// nothing.
func (s *PostgresServer) StopImmediate(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	p := s.proc
	s.proc = nil
	if err := p.stop(syscall.SIGQUIT); err != nil {
		logTails(t, "postgres", s.logPath)
		t.Fatalf("%v", err)
	}
}

// Pause freezes the postmaster and all its backends with SIGSTOP:
// connections stay open but nothing is answered until
// [PostgresServer.Resume].
func (s *PostgresServer) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume continues a server frozen by [PostgresServer.Pause].
func (s *PostgresServer) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *PostgresServer) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("testenv: postgres on %s is not running", s.addrLocked())
	}
	if err := s.proc.signalAll(sig); err != nil {
		t.Fatalf("testenv: send %v to postgres: %v", sig, err)
	}
}

// String returns a description of the server for messages.
func (s *PostgresServer) String() string { return "postgres " + s.Addr() }
