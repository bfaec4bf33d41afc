package redisstore_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/redisstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newProxiedClient connects a client through a fault-injecting proxy. It
// pipelines on one connection (PipelineMultiplex -1): rueidis dials its
// extra pipelining connections lazily, and a connection first dialed while
// the proxy drops replies never finishes its handshake, so a request routed
// to it would never reach the server; the suite's dropped-reply cases need
// the request to arrive.
func newProxiedClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatalf("connect to %v: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newClient connects a rueidis client with retries disabled and closes it
// when the test ends.
func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableRetry: true})
	if err != nil {
		t.Fatalf("connect to %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newClusterClient connects a cluster client whose every connection to a
// node goes through that node's proxy (via maps node address to proxy
// address); nil via connects directly.
func newClusterClient(t testing.TB, addrs []string, via map[string]string) rueidis.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: addrs, DisableRetry: true}
	if via != nil {
		opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			p, ok := via[addr]
			if !ok {
				return nil, fmt.Errorf("test: no proxy for node %s", addr)
			}
			return d.DialContext(ctx, "tcp", p)
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to cluster %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checked returns a store on c whose server check already passed.
func checked(t testing.TB, c rueidis.Client, o *redisstore.Options) *redisstore.Store {
	t.Helper()
	s := newRedis(t, c, o)
	if err := s.Check(ctxT(t)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return s
}

// dbsize returns the number of keys on a single server.
func dbsize(t testing.TB, c rueidis.Client) int64 {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().Dbsize().Build()).AsInt64()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return n
}

// get returns a key's value ("" and false if it does not exist).
func get(t testing.TB, c rueidis.Client, key string) (string, bool) {
	t.Helper()
	v, err := c.Do(ctxT(t), c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}

// pttl returns a key's PTTL.
func pttl(t testing.TB, c rueidis.Client, key string) time.Duration {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return time.Duration(n) * time.Millisecond
}

// pttl2 returns the PTTL of two keys of one hash slot read in one atomic
// step (a script), so that the time between two reads does not show as a
// difference.
func pttl2(t testing.TB, c rueidis.Client, a, b string) (time.Duration, time.Duration) {
	t.Helper()
	res, err := c.Do(ctxT(t), c.B().Eval().Script("return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}").Numkeys(2).Key(a, b).Build()).AsIntSlice()
	if err != nil || len(res) != 2 {
		t.Fatalf("PTTL %s and %s: %v, %v", a, b, res, err)
	}
	return time.Duration(res[0]) * time.Millisecond, time.Duration(res[1]) * time.Millisecond
}

// uniq returns a name unique to the running test.
func uniq(t testing.TB, suffix string) string {
	return fmt.Sprintf("%s/%d/%s", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), suffix)
}
