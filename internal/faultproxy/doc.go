// Package faultproxy is a TCP proxy on 127.0.0.1 that injects network
// faults between clients and a server. Tests put it in front of a store's
// server through internal/testenv, and `tenure proof` puts it between its
// workers and the store under test.
//
// [Start] listens on a free loopback port and forwards every connection
// accepted there to an upstream host:port. Until told otherwise it copies
// bytes both ways unchanged. Its faults, each switched on and off at any
// time and from any goroutine:
//
//   - [Proxy.Cut]: every connection is reset and new ones are closed as
//     soon as they are accepted; the server is unreachable.
//   - [Proxy.DropReplies]: requests still reach the server and take
//     effect, but every byte the server sends back is discarded; clients
//     see timeouts of operations that may have applied.
//   - [Proxy.Delay]: each chunk the server sends waits a fixed time before
//     it goes on to the client.
//   - [Proxy.Hold], [Proxy.HoldWhere], [Proxy.HoldPorts]: the link stays
//     up, but what the server sends (and, for HoldPorts, what the client
//     sends) is kept in the proxy, in order, for all connections, for
//     those whose client sent a marker, or for those from a set of client
//     ports. [Proxy.Release] delivers what was held, in order.
//   - [Proxy.SetUpstream]: every connection is closed and new ones go to
//     another server, as a failover that moves a primary's address would.
//
// [Proxy.Heal] ends every fault and closes every connection, so that
// clients reconnect with clean streams; [Proxy.Close] stops the proxy.
//
// Closing a connection resets both of its sides (SO_LINGER 0), so that
// peers notice at once rather than after a timeout. The package uses the
// standard library only.
package faultproxy
