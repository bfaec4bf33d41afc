package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// deadline bounds every wait of these tests.
const deadline = 10 * time.Second

// echo is a loopback TCP server that sends back whatever it receives and
// records it.
type echo struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	got   []byte // everything received, over all connections
	conns []net.Conn
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go e.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func (e *echo) serve(c net.Conn) {
	defer e.wg.Done()
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			e.mu.Lock()
			e.got = append(e.got, buf[:n]...)
			e.mu.Unlock()
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (e *echo) addr() string { return e.ln.Addr().String() }

// received returns everything e received so far.
func (e *echo) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return string(e.got)
}

// accepted returns how many connections e accepted.
func (e *echo) accepted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

func start(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := Start(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), deadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// expect reads len(want) bytes from c and fails unless they are want.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(deadline))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// roundTrip sends s over c and reads its echo.
func roundTrip(t *testing.T, c net.Conn, s string) {
	t.Helper()
	send(t, c, s)
	expect(t, c, s)
}

// proxied starts an echo server and a proxy in front of it, and connects
// to the proxy with a round trip of first.
func proxied(t *testing.T, first string) (*echo, *Proxy, net.Conn) {
	t.Helper()
	e := newEcho(t)
	p := start(t, e.addr())
	c := dial(t, p)
	roundTrip(t, c, first)
	return e, p, c
}

// expectClosed reads from c until it fails and fails unless c was closed
// with nothing more to read.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(deadline))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open after %v", deadline)
	}
	if len(got) > 0 {
		t.Fatalf("read %q from a connection that should have closed with nothing to read", got)
	}
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %v: not %s", deadline, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// held returns what p holds back for the connection whose client is c:
// its requests and its replies.
func held(p *Proxy, c net.Conn) (requests, replies string) {
	port := c.LocalAddr().(*net.TCPAddr).Port
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		if pc.port == port {
			pc.up.mu.Lock()
			requests = string(pc.up.held)
			pc.up.mu.Unlock()
			pc.down.mu.Lock()
			replies = string(pc.down.held)
			pc.down.mu.Unlock()
		}
	}
	return requests, replies
}

func heldReplies(p *Proxy, c net.Conn, want string) func() bool {
	return func() bool { _, r := held(p, c); return r == want }
}

func port(c net.Conn) int { return c.LocalAddr().(*net.TCPAddr).Port }

func TestProxyForwards(t *testing.T) {
	e, p, _ := proxied(t, "ping")
	if p.Upstream() != e.addr() {
		t.Fatalf("Upstream() = %q, want %q", p.Upstream(), e.addr())
	}
	if got := e.received(); got != "ping" {
		t.Fatalf("the server received %q", got)
	}
}

// Hold keeps the replies, in order, and lets the requests through;
// Release delivers them once, in order, and forwards again.
func TestProxyHoldRelease(t *testing.T) {
	e, p, c := proxied(t, "a")

	p.Hold()
	send(t, c, "one")
	waitFor(t, "holding one", heldReplies(p, c, "one"))
	send(t, c, "two")
	waitFor(t, "holding onetwo", heldReplies(p, c, "onetwo"))
	if got := e.received(); got != "aonetwo" {
		t.Fatalf("the server received %q, want the held requests too", got)
	}

	p.Release()
	expect(t, c, "onetwo")
	waitFor(t, "nothing held", heldReplies(p, c, ""))
	roundTrip(t, c, "three") // nothing was delivered twice
}

// HoldWhere holds the replies of the connection whose client sent the
// marker only.
func TestProxyHoldWhere(t *testing.T) {
	e := newEcho(t)
	p := start(t, e.addr())
	marked, other := dial(t, p), dial(t, p)
	p.HoldWhere("MARK")

	send(t, marked, "x MARK y")
	waitFor(t, "holding the marked connection's reply", heldReplies(p, marked, "x MARK y"))
	roundTrip(t, other, "plain")
	send(t, marked, "z")
	waitFor(t, "holding the marked connection's replies", heldReplies(p, marked, "x MARK yz"))

	p.Release()
	expect(t, marked, "x MARK yz")
}

// HoldPorts holds both directions of the connections from the given
// client ports; a new hold delivers what the old one held for
// connections it does not hold.
func TestProxyHoldPorts(t *testing.T) {
	e, p, a := proxied(t, "a0")
	b := dial(t, p)
	roundTrip(t, b, "b0")

	p.HoldPorts(map[int]bool{port(a): true})
	send(t, a, "a1")
	waitFor(t, "holding a's request", func() bool { r, _ := held(p, a); return r == "a1" })
	roundTrip(t, b, "b1")
	if got := e.received(); got != "a0b0b1" {
		t.Fatalf("the server received %q: a held request reached it", got)
	}

	p.HoldPorts(map[int]bool{port(b): true})
	expect(t, a, "a1")
	send(t, b, "b2")
	waitFor(t, "holding b's request", func() bool { r, _ := held(p, b); return r == "b2" })

	p.Release()
	expect(t, b, "b2")
	if got := e.received(); got != "a0b0b1a1b2" {
		t.Fatalf("the server received %q", got)
	}
}

// Cut closes every connection and refuses new ones until Heal.
func TestProxyCutHeal(t *testing.T) {
	_, p, c := proxied(t, "a")

	p.Cut()
	expectClosed(t, c)
	// A new connection is reset at once: the dial itself may see it.
	if c, err := net.DialTimeout("tcp", p.Addr(), deadline); err == nil {
		defer c.Close()
		expectClosed(t, c)
	}

	p.Heal()
	roundTrip(t, dial(t, p), "b")
}

// DropReplies lets requests through and discards the replies; Heal
// closes the connection it dropped replies on.
func TestProxyDropReplies(t *testing.T) {
	e, p, c := proxied(t, "a")

	p.DropReplies()
	send(t, c, "lost")
	waitFor(t, "the request reached the server", func() bool { return e.received() == "alost" })
	p.Heal()
	expectClosed(t, c) // with no reply delivered
}

// Delay holds each reply back for the delay and keeps the connections.
func TestProxyDelay(t *testing.T) {
	_, p, c := proxied(t, "a")
	const d = 100 * time.Millisecond
	p.Delay(d)
	begin := time.Now()
	roundTrip(t, c, "slow")
	if took := time.Since(begin); took < d {
		t.Fatalf("a reply took %v with a delay of %v", took, d)
	}
	p.Delay(0)
	roundTrip(t, c, "fast")
}

// SetUpstream closes the connections and sends new ones to the new
// upstream.
func TestProxySetUpstream(t *testing.T) {
	e1, p, c := proxied(t, "one")
	e2 := newEcho(t)

	p.SetUpstream(e2.addr())
	if p.Upstream() != e2.addr() {
		t.Fatalf("Upstream() = %q, want %q", p.Upstream(), e2.addr())
	}
	expectClosed(t, c)
	roundTrip(t, dial(t, p), "two")
	if e1.received() != "one" || e2.received() != "two" || e2.accepted() != 1 {
		t.Fatalf("received %q and %q", e1.received(), e2.received())
	}
}

// Close closes the connections, also one whose reply waits out a delay,
// and may be called again.
func TestProxyClose(t *testing.T) {
	e := newEcho(t)
	p, err := Start(e.addr())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	p.Delay(time.Hour)
	send(t, c, "a")
	waitFor(t, "the request reached the server", func() bool { return e.received() == "a" })
	p.Close()
	expectClosed(t, c)
	p.Close()
}
