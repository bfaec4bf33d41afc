package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy modes.
const (
	proxyForward int32 = iota // forward both ways
	proxyCut                  // no connection survives
	proxyDrop                 // forward requests, discard replies
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one upstream address, for
// injecting network faults between a client and a server. It starts out
// forwarding everything; [Proxy.Cut], [Proxy.DropReplies] and [Proxy.Heal]
// switch between its modes at any time. All methods are safe for
// concurrent use.
type Proxy struct {
	ln   net.Listener
	mode atomic.Int32

	mu       sync.Mutex // guards upstream, conns and closed, and orders mode changes with them
	upstream string
	conns    map[*proxyConn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// proxyConn is one proxied connection: the accepted client side and the
// dialed server side.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both sides, resetting them so that peers notice at once.
func (c *proxyConn) close() {
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

// NewProxy starts a proxy that forwards connections to upstream (host:port)
// and stops it, closing every connection, when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients should connect to instead of the
// upstream, as host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// SetUpstream makes the proxy forward to addr (host:port) from now on, as
// a failover to another server would: every existing connection is closed,
// so that clients reconnect, and new ones go to addr. The mode is kept.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	p.upstream = addr
	var conns []*proxyConn
	for c := range p.conns {
		conns = append(conns, c)
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Cut makes the upstream unreachable through the proxy: every existing
// connection is closed (reset) and new connections are closed as soon as
// they are accepted, until [Proxy.Heal].
func (p *Proxy) Cut() {
	p.setMode(proxyCut, true)
}

// DropReplies keeps forwarding what clients send, so requests still reach
// the server and take effect, but discards every byte the server sends
// back: clients see no reply at all. Existing connections are kept. It lasts
// until [Proxy.Heal] or [Proxy.Cut].
//
// Only requests sent over connections that were established before count on
// reaching the server: a connection opened while replies are dropped never
// gets an answer to its handshake (HELLO, startup message, HTTP/2
// settings), so most clients send nothing more over it. Clients that open
// connections lazily (rueidis with PipelineMultiplex >= 0, pgxpool) may
// therefore pick a fresh connection and never send the request at all.
func (p *Proxy) DropReplies() {
	p.setMode(proxyDrop, false)
}

// Heal closes every existing connection, so that clients reconnect with a
// clean stream instead of one missing replies, and forwards normally again.
func (p *Proxy) Heal() {
	p.setMode(proxyForward, true)
}

// setMode switches the mode and, when closeAll is set, closes every
// existing connection.
func (p *Proxy) setMode(mode int32, closeAll bool) {
	p.mu.Lock()
	p.mode.Store(mode)
	var conns []*proxyConn
	if closeAll {
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

// close stops the proxy and waits for its goroutines.
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		c := &proxyConn{client: conn}
		if p.mode.Load() == proxyCut {
			c.close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the upstream for c and copies data both ways until either
// side closes or the proxy closes c.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	upstream := p.Upstream()
	server, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		c.close()
		return
	}
	c.server = server
	p.mu.Lock()
	if p.closed || p.mode.Load() == proxyCut || p.upstream != upstream {
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

	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := c.client.Read(buf)
			if n > 0 {
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
		if n > 0 && p.mode.Load() == proxyForward {
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.close()
	<-done
}
