package testenv

import (
	"testing"

	"github.com/tenurekit/tenure/internal/faultproxy"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one upstream address, for
// injecting network faults between a client and a server. It starts out
// forwarding everything; [Proxy.Cut], [Proxy.DropReplies] and [Proxy.Heal]
// switch between its modes at any time, and [Proxy.Hold] holds back what
// the server sends until [Proxy.Release]. All methods are safe for
// concurrent use. It is a [faultproxy.Proxy] that belongs to one test.
type Proxy struct {
	p *faultproxy.Proxy
}

// NewProxy starts a proxy that forwards connections to upstream (host:port)
// and stops it, closing every connection, when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream)
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return &Proxy{p: p}
}

// Addr returns the address clients should connect to instead of the
// upstream, as host:port.
func (p *Proxy) Addr() string { return p.p.Addr() }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.p.Upstream() }

// SetUpstream makes the proxy forward to addr (host:port) from now on, as
// a failover to another server would: every existing connection is closed,
// so that clients reconnect, and new ones go to addr. The mode is kept.
func (p *Proxy) SetUpstream(addr string) { p.p.SetUpstream(addr) }

// Cut makes the upstream unreachable through the proxy: every existing
// connection is closed (reset) and new connections are closed as soon as
// they are accepted, until [Proxy.Heal].
func (p *Proxy) Cut() { p.p.Cut() }

// DropReplies keeps forwarding what clients send, so requests still reach
// the server and take effect, but discards every byte the server sends
// back: clients see no reply at all. Existing connections are kept. It
// lasts until [Proxy.Heal] or [Proxy.Cut]. See [faultproxy.Proxy.DropReplies]
// for the clients that open connections lazily.
func (p *Proxy) DropReplies() { p.p.DropReplies() }

// Hold keeps the link up but holds back every byte the server sends,
// in order, until [Proxy.Release]; requests still reach the server and
// take effect. See [faultproxy.Proxy.Hold].
func (p *Proxy) Hold() { p.p.Hold() }

// HoldWhere is Hold for the connections over which the client sent marker
// (within its first 4 KiB) only: for a proxy that clients and a Redis
// replica share, HoldWhere("REPLCONF") holds back the replication stream
// and nothing else.
func (p *Proxy) HoldWhere(marker string) { p.p.HoldWhere(marker) }

// Release ends Hold: what was held is delivered, in order, and the proxy
// forwards again.
func (p *Proxy) Release() { p.p.Release() }

// Heal closes every existing connection, so that clients reconnect with a
// clean stream instead of one missing replies, and forwards normally again.
func (p *Proxy) Heal() { p.p.Heal() }
