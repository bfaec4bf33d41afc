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
	"time"

	"github.com/tenurekit/tenure/internal/faultproxy"
	"github.com/tenurekit/tenure/internal/storeurl"
)

// proxied starts a proxy in front of the server of t and returns it with
// the store URL the workers use to go through it.
func proxied(ctx context.Context, t target) (*faultproxy.Proxy, string, error) {
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
		p, err := faultproxy.Start(host)
		if err != nil {
			return nil, "", err
		}
		pu.Host = p.Addr()
		return p, pu.String(), nil
	case storeurl.Etcd:
		if len(u.Endpoints) != 1 {
			return nil, "", fmt.Errorf("%w: proxy faults need a single etcd endpoint", ErrInvalid)
		}
		host = strings.TrimPrefix(strings.TrimPrefix(u.Endpoints[0], "http://"), "https://")
		p, err := faultproxy.Start(host)
		if err != nil {
			return nil, "", err
		}
		return p, "etcd://" + p.Addr(), nil
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
// pid has open to the proxy at proxyAddr (Linux: from /proc/net/tcp and the
// process's file descriptors).
func clientPorts(proxyAddr string, pid int) (map[int]bool, error) {
	_, ps, err := net.SplitHostPort(proxyAddr)
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
