package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// respCall sends one command to the Redis server at addr over a fresh
// connection and returns its reply flattened to text: simple strings, bulk
// strings and integers as they are, arrays as their elements joined by
// newlines. An error reply is returned as an error. It is used for
// readiness probes and cluster administration, where a full client would
// get in the way.
func respCall(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readRESP(bufio.NewReader(conn))
}

// readRESP reads one RESP2 reply.
func readRESP(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("resp: empty line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("resp: bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("resp: bad array length %q", line)
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			s, err := readRESP(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "\n"), nil
	default:
		return "", fmt.Errorf("resp: unexpected reply %q", line)
	}
}

// redisPing succeeds when the server at addr answers PING with PONG.
func redisPing(ctx context.Context, addr string) error {
	s, err := respCall(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if s != "PONG" {
		return fmt.Errorf("PING answered %q", s)
	}
	return nil
}

// redisReady succeeds when the server at addr answers PING and is the
// process pid, not some other server that got hold of the port.
func redisReady(ctx context.Context, addr string, pid int) error {
	if err := redisPing(ctx, addr); err != nil {
		return err
	}
	info, err := respCall(ctx, addr, "INFO", "server")
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid)
	for _, line := range strings.Split(info, "\n") {
		if strings.TrimSpace(line) == want {
			return nil
		}
	}
	return fmt.Errorf("%s is served by another redis-server (want %s)", addr, want)
}
