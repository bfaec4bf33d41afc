package faultproxy

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Modes.
const (
	forward int32 = iota // forward both ways
	cut                  // no connection survives
	drop                 // forward requests, discard replies
)

const (
	// dialTimeout bounds the dial to the upstream of each connection.
	dialTimeout = 5 * time.Second
	// bufSize is the size of each read.
	bufSize = 32 << 10
	// sentMax bounds how much of what a client sent a connection
	// remembers, for [Proxy.HoldWhere].
	sentMax = 4 << 10
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one upstream address. It
// starts out forwarding everything; its methods inject and end faults (see
// the package documentation). All methods are safe for concurrent use.
type Proxy struct {
	ln    net.Listener
	mode  atomic.Int32
	delay atomic.Int64          // a time.Duration: what each reply waits
	hold  atomic.Pointer[holds] // nil: nothing held back

	mu       sync.Mutex // guards upstream, conns and closed, and orders mode changes with them
	upstream string
	conns    map[*conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// holds says which connections a hold holds back, and which of their
// directions.
type holds struct {
	marker []byte       // non-nil: only replies of connections whose client sent it
	ports  map[int]bool // non-nil: only connections from these client ports, both ways
}

// replies reports whether h holds back what the server sends over c.
func (h *holds) replies(c *conn) bool {
	switch {
	case h == nil:
		return false
	case h.ports != nil:
		return h.ports[c.port]
	case h.marker != nil:
		return c.sentHas(h.marker)
	}
	return true
}

// requests reports whether h holds back what the client sends over c.
func (h *holds) requests(c *conn) bool {
	return h != nil && h.ports != nil && h.ports[c.port]
}

// conn is one proxied connection: the accepted client side and the dialed
// server side.
type conn struct {
	client, server net.Conn
	port           int // the client's port
	once           sync.Once
	done           chan struct{} // closed by close

	up   half // client -> server
	down half // server -> client

	mu   sync.Mutex // guards sent
	sent []byte     // the first sentMax bytes the client sent
}

// half is one direction of a connection.
type half struct {
	dst     net.Conn
	holding func() bool // whether to hold back what goes to dst; called with mu held

	mu   sync.Mutex // guards held and writes to dst
	held []byte     // bytes held back, in order
}

// send writes b to dst, after whatever was held back, or holds it back
// too. send(nil) delivers what is held unless it is still to be held.
func (h *half) send(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding() {
		h.held = append(h.held, b...)
		return nil
	}
	if len(h.held) > 0 {
		held := h.held
		h.held = nil
		if _, err := h.dst.Write(held); err != nil {
			return err
		}
	}
	if len(b) == 0 {
		return nil
	}
	_, err := h.dst.Write(b)
	return err
}

// remember keeps the start of what the client sent, for markers.
func (c *conn) remember(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sent) < sentMax {
		c.sent = append(c.sent, b[:min(len(b), sentMax-len(c.sent))]...)
	}
}

// sentHas reports whether the client sent marker (within sentMax bytes).
func (c *conn) sentHas(marker []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Contains(c.sent, marker)
}

// close closes both sides, resetting them so that peers notice at once.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		for _, nc := range []net.Conn{c.client, c.server} {
			if nc == nil {
				continue
			}
			if tc, ok := nc.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			nc.Close()
		}
	})
}

// wait waits for d, or less if c closes meanwhile; it reports whether c is
// still open.
func (c *conn) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// Start starts a proxy on a free port of 127.0.0.1 that forwards
// connections to upstream (host:port). [Proxy.Close] stops it.
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
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
// so that clients reconnect, and new ones go to addr. Faults in force stay
// in force.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	p.upstream = addr
	conns := p.takeConns()
	p.mu.Unlock()
	closeAll(conns)
}

// Cut makes the upstream unreachable through the proxy: every existing
// connection is closed (reset) and new connections are closed as soon as
// they are accepted, until [Proxy.Heal].
func (p *Proxy) Cut() { p.setMode(cut, true) }

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
func (p *Proxy) DropReplies() { p.setMode(drop, false) }

// Delay makes each chunk the server sends wait d before the proxy passes
// it on (or drops or holds it, as the other faults say); the proxy reads
// the next chunk only then. Existing connections are kept. Delay(0) ends
// it, as does [Proxy.Heal].
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Hold keeps the link up but holds back every byte the server sends:
// requests still reach the server and take effect, replies and streams
// from it are kept in the proxy, in order, until [Proxy.Release] delivers
// them. A connection that closes meanwhile loses what was held for it, as
// a server that dies before sending would. Between a Redis replica and its
// primary this is a replica that lags while its link stays up: the
// primary still counts it as connected (the replica's acknowledgements
// keep flowing to it), but the replica applies nothing new.
//
// A hold replaces the one before it: what that one held for connections
// the new one does not hold is delivered.
func (p *Proxy) Hold() { p.setHold(&holds{}) }

// HoldWhere is [Proxy.Hold] for the connections over which the client sent
// marker (within its first 4 KiB) only: for a proxy that clients and a
// Redis replica share, HoldWhere("REPLCONF") holds back the replication
// stream and nothing else.
func (p *Proxy) HoldWhere(marker string) { p.setHold(&holds{marker: []byte(marker)}) }

// HoldPorts holds back both directions of the connections whose client
// side has one of the given local ports (those of one process, say): a
// request sent meanwhile reaches the server only at [Proxy.Release], and
// a reply reaches the client only then. Other connections are not held.
// As [Proxy.Hold], it replaces the hold before it.
func (p *Proxy) HoldPorts(ports map[int]bool) {
	p.setHold(&holds{ports: maps.Clone(ports)})
}

// Release ends a hold: what was held is delivered, each direction of each
// connection in order, and the proxy forwards again.
func (p *Proxy) Release() { p.setHold(nil) }

// Heal ends every fault (a cut, dropped replies, a delay, a hold, losing
// what the hold held) and closes every existing connection, so that
// clients reconnect with a clean stream instead of one missing replies.
func (p *Proxy) Heal() {
	p.hold.Store(nil)
	p.delay.Store(0)
	p.setMode(forward, true)
}

// Close stops the proxy, closing every connection, and waits for its
// goroutines. Closing it again does nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.takeConns()
	p.mu.Unlock()
	p.ln.Close()
	closeAll(conns)
	p.wg.Wait()
}

// setHold installs h and delivers what is held and no longer to be held.
func (p *Proxy) setHold(h *holds) {
	p.hold.Store(h)
	p.mu.Lock()
	conns := p.connList()
	p.mu.Unlock()
	for _, c := range conns {
		c.up.send(nil)
		c.down.send(nil)
	}
}

// setMode switches the mode and, when closeConns is set, closes every
// existing connection.
func (p *Proxy) setMode(mode int32, closeConns bool) {
	p.mu.Lock()
	p.mode.Store(mode)
	var conns []*conn
	if closeConns {
		conns = p.takeConns()
	}
	p.mu.Unlock()
	closeAll(conns)
}

// connList returns p's connections; p.mu is held.
func (p *Proxy) connList() []*conn {
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// takeConns removes every connection from p and returns them; p.mu is
// held.
func (p *Proxy) takeConns() []*conn {
	conns := p.connList()
	clear(p.conns)
	return conns
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		c.close()
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		c := &conn{client: nc, done: make(chan struct{})}
		if p.mode.Load() == cut {
			c.close()
			continue
		}
		if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
			c.port = a.Port
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the upstream for c and copies data both ways until either
// side closes or the proxy closes c.
func (p *Proxy) serve(c *conn) {
	defer p.wg.Done()
	upstream := p.Upstream()
	server, err := net.DialTimeout("tcp", upstream, dialTimeout)
	if err != nil {
		c.close()
		return
	}
	c.server = server
	c.up = half{dst: server, holding: func() bool { return p.hold.Load().requests(c) }}
	c.down = half{dst: c.client, holding: func() bool { return p.hold.Load().replies(c) }}
	p.mu.Lock()
	if p.closed || p.mode.Load() == cut || p.upstream != upstream {
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
		buf := make([]byte, bufSize)
		for {
			n, err := c.client.Read(buf)
			if n > 0 {
				c.remember(buf[:n])
				if werr := c.up.send(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.close()
	}()
	buf := make([]byte, bufSize)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 && !c.wait(d) {
				break
			}
			if p.mode.Load() == forward {
				if werr := c.down.send(buf[:n]); werr != nil {
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
