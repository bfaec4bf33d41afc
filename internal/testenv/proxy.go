package testenv

import (
	"bytes"
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
// switch between its modes at any time, and [Proxy.Hold] holds back what
// the server sends until [Proxy.Release]. All methods are safe for
// concurrent use.
type Proxy struct {
	ln   net.Listener
	mode atomic.Int32
	hold atomic.Pointer[holdSpec] // nil: nothing held back

	mu       sync.Mutex // guards upstream, conns and closed, and orders mode changes with them
	upstream string
	conns    map[*proxyConn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// holdSpec says which connections [Proxy.Hold] holds back.
type holdSpec struct {
	marker []byte // hold only connections whose client sent it; nil: all
}

// sentMax bounds how much of what a client sent a connection remembers,
// for [Proxy.HoldWhere].
const sentMax = 4 << 10

// proxyConn is one proxied connection: the accepted client side and the
// dialed server side.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once

	mu   sync.Mutex // guards held, sent and writes to client
	held []byte     // server bytes held back, in order
	sent []byte     // the first sentMax bytes the client sent
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

// Hold keeps the link up but holds back every byte the server sends:
// requests still reach the server and take effect, replies and streams
// from it are kept in the proxy, in order, until [Proxy.Release] delivers
// them. A connection that closes meanwhile loses what was held for it, as
// a server that dies before sending would. Between a Redis replica and its
// primary this is a replica that lags while its link stays up: the
// primary still counts it as connected (the replica's acknowledgements
// keep flowing to it), but the replica applies nothing new.
func (p *Proxy) Hold() { p.hold.Store(&holdSpec{}) }

// HoldWhere is Hold for the connections over which the client sent marker
// (within its first 4 KiB) only: for a proxy that clients and a Redis
// replica share, HoldWhere("REPLCONF") holds back the replication stream
// and nothing else.
func (p *Proxy) HoldWhere(marker string) { p.hold.Store(&holdSpec{marker: []byte(marker)}) }

// Release ends Hold: what was held is delivered, in order, and the proxy
// forwards again.
func (p *Proxy) Release() {
	p.hold.Store(nil)
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if len(c.held) > 0 {
			c.client.Write(c.held)
			c.held = nil
		}
		c.mu.Unlock()
	}
}

// holding reports whether c's server bytes are held back; c.mu is held.
func (p *Proxy) holding(c *proxyConn) bool {
	h := p.hold.Load()
	return h != nil && (h.marker == nil || bytes.Contains(c.sent, h.marker))
}

// deliver sends server bytes to c's client, or holds them back.
func (p *Proxy) deliver(c *proxyConn, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.holding(c) {
		c.held = append(c.held, b...)
		return nil
	}
	if len(c.held) > 0 {
		if _, err := c.client.Write(c.held); err != nil {
			return err
		}
		c.held = nil
	}
	_, err := c.client.Write(b)
	return err
}

// Heal closes every existing connection, so that clients reconnect with a
// clean stream instead of one missing replies, and forwards normally again.
func (p *Proxy) Heal() {
	p.hold.Store(nil)
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
				c.mu.Lock()
				if len(c.sent) < sentMax {
					c.sent = append(c.sent, buf[:min(n, sentMax-len(c.sent))]...)
				}
				c.mu.Unlock()
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
			if werr := p.deliver(c, buf[:n]); werr != nil {
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
