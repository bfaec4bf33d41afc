package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EtcdServer is an etcd cluster of one or more members, each listening on
// 127.0.0.1 with plain HTTP client and peer URLs. Members keep their ports
// and data directories across Stop, Start and their per-member variants.
// All methods are safe for concurrent use.
type EtcdServer struct {
	bin     string
	base    string // private temp dir holding each member's data and log
	token   string
	members []*etcdMember

	mu sync.Mutex // guards the members' ports and processes
}

// etcdMember is one etcd process of a cluster.
type etcdMember struct {
	name       string
	dataDir    string
	logPath    string
	clientPort int
	peerPort   int
	proc       *process // nil while stopped
}

func (m *etcdMember) clientURL() string { return "http://127.0.0.1:" + strconv.Itoa(m.clientPort) }
func (m *etcdMember) peerURL() string   { return "http://127.0.0.1:" + strconv.Itoa(m.peerPort) }

// Etcd starts a fresh single-member etcd and stops it, removing its data,
// when the test ends. It skips or fails the test as [RequireBinary] does
// when etcd is not installed.
func Etcd(t testing.TB) *EtcdServer {
	t.Helper()
	return EtcdCluster(t, 1)
}

// EtcdCluster starts a fresh etcd cluster of n members and stops it,
// removing its data, when the test ends. It returns once every member
// reports itself healthy and a client read succeeds.
func EtcdCluster(t testing.TB, n int) *EtcdServer {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: EtcdCluster needs at least one member, got %d", n)
	}
	bin := RequireBinary(t, "etcd")
	s, err := newEtcd(bin, n)
	return forTest(t, "etcd", s, err)
}

// sharedEtcd is started by the first call of SharedEtcd.
var sharedEtcd shared[*EtcdServer]

// SharedEtcd returns the single-member etcd shared by all tests of the
// process, starting it on first use. Tests must use keys (and leases) of
// their own and must not stop or pause it. [Main] stops it.
func SharedEtcd(t testing.TB) *EtcdServer {
	t.Helper()
	bin := RequireBinary(t, "etcd")
	return sharedEtcd.get(t, "shared etcd", func() (*EtcdServer, error) { return newEtcd(bin, 1) })
}

// newEtcd creates a private directory and starts an n-member cluster in
// it, on fresh ports again (and with wiped data) when one of the chosen
// ports turns out to be taken. On failure the returned server (never nil)
// still names its log files.
func newEtcd(bin string, n int) (*EtcdServer, error) {
	s := &EtcdServer{bin: bin}
	base, err := makeTempDir("etcd")
	if err != nil {
		return s, err
	}
	s.base = base
	s.token = filepath.Base(base)
	for i := range n {
		name := "m" + strconv.Itoa(i)
		s.members = append(s.members, &etcdMember{
			name:    name,
			dataDir: filepath.Join(base, name),
			logPath: filepath.Join(base, name+".log"),
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		for _, m := range s.members {
			if m.clientPort, err = freePort(); err != nil {
				return s, err
			}
			if m.peerPort, err = freePort(); err != nil {
				return s, err
			}
			os.RemoveAll(m.dataDir)
		}
		err = s.startLocked(s.members)
		if err == nil {
			return s, nil
		}
		clash := false
		for _, m := range s.members {
			if m.proc != nil && m.proc.portClash() {
				clash = true
			}
		}
		s.killLocked()
		if !clash || attempt == portAttempts {
			return s, err
		}
	}
}

// initialCluster returns the --initial-cluster value.
func (s *EtcdServer) initialCluster() string {
	parts := make([]string, len(s.members))
	for i, m := range s.members {
		parts[i] = m.name + "=" + m.peerURL()
	}
	return strings.Join(parts, ",")
}

// argv returns the command line of member m.
func (s *EtcdServer) argv(m *etcdMember) []string {
	return []string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL(),
		"--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", s.initialCluster(),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", s.token,
		"--logger=zap",
		"--log-outputs=stderr",
	}
}

// startLocked starts the stopped members among ms and waits until every
// one of them is healthy. Members already running are only waited for. On
// failure the started processes are left running (and recorded) so the
// caller can inspect them; it must stop or kill them.
func (s *EtcdServer) startLocked(ms []*etcdMember) error {
	for _, m := range ms {
		if m.proc != nil {
			continue
		}
		p, err := startProcess(procSpec{
			name:    "etcd member " + m.name + " on " + m.clientURL(),
			bin:     s.bin,
			args:    s.argv(m),
			dir:     s.base,
			logPath: m.logPath,
		})
		if err != nil {
			return err
		}
		m.proc = p
	}
	procs := make([]*process, len(ms))
	for i, m := range ms {
		procs[i] = m.proc
	}
	if !s.quorumLocked() {
		// No member can become healthy before a quorum runs: settle for
		// the members listening.
		return waitUntil("etcd", startTimeout, procs, func(ctx context.Context) error {
			for _, m := range ms {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(m.clientURL(), "http://"))
				if err != nil {
					return fmt.Errorf("member %s: %w", m.name, err)
				}
				c.Close()
			}
			return nil
		})
	}
	return waitUntil("etcd", startTimeout, procs, func(ctx context.Context) error {
		for _, m := range ms {
			if err := etcdHealth(ctx, m.clientURL()); err != nil {
				return fmt.Errorf("member %s: %w", m.name, err)
			}
		}
		return etcdRead(ctx, ms)
	})
}

// quorumLocked reports whether a majority of the members is running.
func (s *EtcdServer) quorumLocked() bool {
	running := 0
	for _, m := range s.members {
		if m.proc != nil {
			running++
		}
	}
	return running > len(s.members)/2
}

// etcdHealth succeeds when the member at url reports {"health":"true"},
// which etcd 3.4 does only when it has a leader and a quorum read works.
func etcdHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("/health: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// etcdRead performs a v3 read through each member in ms.
func etcdRead(ctx context.Context, ms []*etcdMember) error {
	for _, m := range ms {
		if err := etcdCheckMember(ctx, m); err != nil {
			return fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	return nil
}

// etcdCheckMember reads a key through member m's JSON gateway and makes
// sure m's client URL is served by m itself, not by another etcd that got
// hold of the port: that member must be named and peered as m is.
func etcdCheckMember(ctx context.Context, m *etcdMember) error {
	url := m.clientURL()
	if err := etcdPost(ctx, url, "/v3/kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte("testenv/probe"))}, nil); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
	}
	if err := etcdPost(ctx, url, "/v3/maintenance/status", struct{}{}, &st); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	var ml struct {
		Members []struct {
			ID       string   `json:"ID"`
			Name     string   `json:"name"`
			PeerURLs []string `json:"peerURLs"`
		} `json:"members"`
	}
	if err := etcdPost(ctx, url, "/v3/cluster/member/list", struct{}{}, &ml); err != nil {
		return fmt.Errorf("member list: %w", err)
	}
	for _, mem := range ml.Members {
		if mem.ID == st.Header.MemberID {
			if mem.Name == m.name && slices.Contains(mem.PeerURLs, m.peerURL()) {
				return nil
			}
			return fmt.Errorf("%s is served by etcd member %q with peer URLs %v", url, mem.Name, mem.PeerURLs)
		}
	}
	return fmt.Errorf("%s is served by etcd member %s, which is not in its own member list", url, st.Header.MemberID)
}

// etcdPost sends in as JSON to path on the etcd JSON gateway at url and
// decodes the reply into out (when out is not nil).
func etcdPost(ctx context.Context, url, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", path, resp.Status, strings.TrimSpace(string(reply)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(reply, out)
}

// etcdStopGrace bounds a member's graceful stop. A leader asked to stop
// first hands its leadership over, and when the member it picks has itself
// just stopped, it waits seven seconds for a hand-over that cannot happen;
// being killed instead loses nothing, as etcd syncs its WAL before
// acknowledging a write.
const etcdStopGrace = 2 * time.Second

// stopMemberLocked stops member m with SIGTERM, or SIGKILL after
// etcdStopGrace, and waits for it to exit.
func (s *EtcdServer) stopMemberLocked(m *etcdMember) {
	if m.proc == nil {
		return
	}
	p := m.proc
	m.proc = nil
	p.stopWithin(syscall.SIGTERM, etcdStopGrace)
}

// stopAllLocked stops every member. A single member is stopped gracefully.
// The members of a larger cluster are killed together: stopping them one
// after the other makes the last ones try to hand their leadership over to
// members already gone, which takes seconds, and etcd loses no acknowledged
// write to SIGKILL since it syncs its WAL first.
func (s *EtcdServer) stopAllLocked() {
	if len(s.members) == 1 {
		s.stopMemberLocked(s.members[0])
		return
	}
	var running []*process
	for _, m := range s.members {
		if m.proc != nil {
			running = append(running, m.proc)
			m.proc.signalAll(syscall.SIGKILL)
			m.proc = nil
		}
	}
	for _, p := range running {
		p.kill()
	}
}

// killLocked kills every member at once.
func (s *EtcdServer) killLocked() {
	for _, m := range s.members {
		if m.proc != nil {
			m.proc.kill()
			m.proc = nil
		}
	}
}

// destroy stops every member and removes the cluster's directory.
func (s *EtcdServer) destroy() error {
	return destroyDir(&s.mu, func() error { s.stopAllLocked(); return nil }, s.base)
}

// logFiles lists the members' log files.
func (s *EtcdServer) logFiles() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, m := range s.members {
		out = append(out, m.logPath)
	}
	return out
}

// Endpoints returns the client URLs of all members (http://127.0.0.1:PORT),
// including stopped ones, in member order.
func (s *EtcdServer) Endpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.members))
	for i, m := range s.members {
		out[i] = m.clientURL()
	}
	return out
}

// Size returns the number of members.
func (s *EtcdServer) Size() int { return len(s.members) }

// Stop stops every member and waits for them to exit. Data is kept: a
// single member is stopped gracefully (SIGTERM), the members of a larger
// cluster are killed together (SIGKILL), which etcd survives without losing
// any acknowledged write and which spares seconds of leadership hand-overs
// to members that are going away.
func (s *EtcdServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAllLocked()
}

// Start starts every stopped member again with its data and waits until
// all members are healthy.
func (s *EtcdServer) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(s.members); err != nil {
		logTails(t, "etcd", s.logFiles()...)
		t.Fatalf("testenv: restart etcd: %v", err)
	}
}

// Restart stops and starts every member, keeping ports and data.
func (s *EtcdServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

// member returns member i or fails the test.
func (s *EtcdServer) member(t testing.TB, i int) *etcdMember {
	t.Helper()
	if i < 0 || i >= len(s.members) {
		t.Fatalf("testenv: etcd member %d out of range [0, %d)", i, len(s.members))
	}
	return s.members[i]
}

// StopMember stops member i gracefully (SIGTERM: a leader hands its
// leadership over first) and waits for it to exit; a member still running
// two seconds later is killed. Its data is kept. The rest of the cluster
// stays up, and keeps serving writes while a quorum of members is running.
func (s *EtcdServer) StopMember(t testing.TB, i int) {
	t.Helper()
	m := s.member(t, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopMemberLocked(m)
}

// StartMember starts stopped member i again. When a quorum of the cluster
// is running with it, it waits until the member reports itself healthy;
// otherwise (the cluster is still short of a quorum, so no member can be
// healthy) it waits only until the member accepts connections. To restart
// every stopped member at once and wait for a healthy cluster, use
// [EtcdServer.Start].
func (s *EtcdServer) StartMember(t testing.TB, i int) {
	t.Helper()
	m := s.member(t, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked([]*etcdMember{m}); err != nil {
		logTails(t, "etcd", m.logPath)
		t.Fatalf("testenv: start etcd member %d: %v", i, err)
	}
}

// PauseMember freezes member i with SIGSTOP until [EtcdServer.ResumeMember].
func (s *EtcdServer) PauseMember(t testing.TB, i int) {
	t.Helper()
	s.signalMember(t, i, syscall.SIGSTOP)
}

// ResumeMember continues member i after [EtcdServer.PauseMember].
func (s *EtcdServer) ResumeMember(t testing.TB, i int) {
	t.Helper()
	s.signalMember(t, i, syscall.SIGCONT)
}

func (s *EtcdServer) signalMember(t testing.TB, i int, sig syscall.Signal) {
	t.Helper()
	m := s.member(t, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.proc == nil {
		t.Fatalf("testenv: etcd member %d is not running", i)
	}
	if err := m.proc.signalAll(sig); err != nil {
		t.Fatalf("testenv: send %v to etcd member %d: %v", sig, i, err)
	}
}
