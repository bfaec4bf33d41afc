package proof

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/internal/storeurl"
)

// Proxy modes.
const (
	proxyForward   int32 = iota // forward both ways
	proxyDelay                  // hold back every reply for the delay
	proxyCut                    // close every connection and refuse new ones
	proxyBlackHole              // forward requests, discard replies
)

// proxyKinds name the proxy faults as the report counts them.
var proxyKinds = map[int32]string{proxyDelay: "proxy-delay", proxyCut: "proxy-cut", proxyBlackHole: "proxy-blackhole"}

// faultProxy is a TCP proxy on 127.0.0.1 between the workers and the
// store's server. It forwards everything until the nemesis delays its
// replies, cuts it (connections reset, new ones refused) or black-holes
// it (requests still reach the server and take effect, replies are
// dropped, so clients see timeouts of operations that may have applied).
type faultProxy struct {
	ln       net.Listener
	upstream string
	delay    time.Duration
	mode     atomic.Int32

	mu     sync.Mutex
	conns  map[*pconn]struct{}
	closed bool
	wg     sync.WaitGroup

	// A hold: what the connections from these client ports send, and
	// what is sent to them, waits until release is closed.
	holdMu  sync.Mutex
	held    map[int]bool
	release chan struct{}
}

type pconn struct {
	client, server net.Conn
	once           sync.Once
}

func (c *pconn) close() {
	c.once.Do(func() {
		for _, conn := range []net.Conn{c.client, c.server} {
			if conn == nil {
				continue
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	})
}

// startProxy listens on a free loopback port and forwards to upstream.
func startProxy(upstream string, delay time.Duration) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, delay: delay, conns: map[*pconn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

// set switches the mode. Cutting and healing close every connection, so
// that clients reconnect with clean streams.
func (p *faultProxy) set(mode int32) {
	p.mu.Lock()
	old := p.mode.Swap(mode)
	var conns []*pconn
	if mode == proxyCut || (mode == proxyForward && old != proxyDelay) {
		for c := range p.conns {
			conns = append(conns, c)
			delete(p.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// hold holds back the requests and the replies of the connections from
// the given client ports (those of one worker) until unhold: a request
// sent meanwhile reaches the server only then, and a reply only then
// reaches the client.
func (p *faultProxy) hold(ports map[int]bool) {
	p.unhold()
	p.holdMu.Lock()
	p.held, p.release = ports, make(chan struct{})
	p.holdMu.Unlock()
}

// unhold lets the held replies go.
func (p *faultProxy) unhold() {
	p.holdMu.Lock()
	if p.release != nil {
		close(p.release)
	}
	p.held, p.release = nil, nil
	p.holdMu.Unlock()
}

// holding returns the channel to wait on before data from or to the
// client on port goes on, nil if it is not held.
func (p *faultProxy) holding(port int) chan struct{} {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	if p.held[port] {
		return p.release
	}
	return nil
}

func (p *faultProxy) close() {
	p.unhold()
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[*pconn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &pconn{client: conn}
		if p.mode.Load() == proxyCut {
			c.close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *faultProxy) serve(c *pconn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.close()
		return
	}
	c.server = server
	p.mu.Lock()
	if p.closed || p.mode.Load() == proxyCut {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	port := 0
	if a, ok := c.client.RemoteAddr().(*net.TCPAddr); ok {
		port = a.Port
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := c.client.Read(buf)
			if n > 0 {
				if ch := p.holding(port); ch != nil {
					<-ch
				}
				if _, werr := c.server.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if ch := p.holding(port); ch != nil {
				<-ch
			}
			mode := p.mode.Load()
			if mode == proxyDelay {
				time.Sleep(p.delay)
				mode = p.mode.Load()
			}
			if mode == proxyForward || mode == proxyDelay {
				if _, werr := c.client.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	c.close()
	<-done
}

// proxied starts a proxy in front of the server of t and returns it with
// the store URL the workers use to go through it.
func proxied(ctx context.Context, t target, delay time.Duration) (*faultProxy, string, error) {
	u, err := storeurl.Parse(t.url)
	if err != nil {
		return nil, "", err
	}
	var host string
	switch u.Kind {
	case storeurl.Redis, storeurl.Postgres:
		pu, err := url.Parse(u.URL)
		if err != nil || pu.Host == "" || strings.Contains(pu.Host, ",") {
			return nil, "", fmt.Errorf("%w: proxy faults need a store URL with one host:port", ErrInvalid)
		}
		host = pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), map[storeurl.Kind]string{storeurl.Redis: "6379", storeurl.Postgres: "5432"}[u.Kind])
		}
		if u.Kind == storeurl.Redis && redisCluster(ctx, host) {
			return nil, "", fmt.Errorf("%w: proxy faults do not apply to Redis Cluster (clients follow the cluster's own addresses around the proxy)", ErrInvalid)
		}
		p, err := startProxy(host, delay)
		if err != nil {
			return nil, "", err
		}
		pu.Host = p.addr()
		return p, pu.String(), nil
	case storeurl.Etcd:
		if len(u.Endpoints) != 1 {
			return nil, "", fmt.Errorf("%w: proxy faults need a single etcd endpoint", ErrInvalid)
		}
		host = strings.TrimPrefix(strings.TrimPrefix(u.Endpoints[0], "http://"), "https://")
		p, err := startProxy(host, delay)
		if err != nil {
			return nil, "", err
		}
		return p, "etcd://" + p.addr(), nil
	}
	return nil, "", fmt.Errorf("%w: proxy faults need a store reached over TCP (Redis, PostgreSQL or etcd), not %s", ErrInvalid, u.Kind)
}

// redisCluster reports whether the Redis server at addr runs in cluster
// mode. A server that does not answer INFO plainly (one that asks for a
// password, say) is taken as a single server.
func redisCluster(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$7\r\ncluster\r\n")); err != nil {
		return false
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "cluster_enabled:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "cluster_enabled:")) == "1"
		}
		if err != nil || strings.HasPrefix(line, "-") {
			return false
		}
	}
}

// clientPorts returns the local ports of the TCP connections that process
// pid has open to the proxy (Linux: from /proc/net/tcp and the process's
// file descriptors).
func (p *faultProxy) clientPorts(pid int) (map[int]bool, error) {
	_, ps, err := net.SplitHostPort(p.addr())
	if err != nil {
		return nil, err
	}
	proxyPort, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, err
	}
	// inode → local port of every socket connected to the proxy's port.
	ports := map[string]int{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			_, lp, _ := strings.Cut(fs[1], ":")
			_, rp, _ := strings.Cut(fs[2], ":")
			l, err1 := strconv.ParseUint(lp, 16, 16)
			r, err2 := strconv.ParseUint(rp, 16, 16)
			if err1 == nil && err2 == nil && r == proxyPort {
				ports[fs[9]] = int(l)
			}
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("proxy: the sockets of worker %d: %w", pid, err)
	}
	out := map[int]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(dir + "/" + fd.Name())
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		if port, ok := ports[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")]; ok {
			out[port] = true
		}
	}
	return out, nil
}
