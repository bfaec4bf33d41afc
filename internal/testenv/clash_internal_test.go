package testenv

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// occupyNextPort makes the next port handed out by freePort one that is
// already taken by a listener, and restores the real source afterwards.
// Tests using it must not run in parallel.
func occupyNextPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	taken := ln.Addr().(*net.TCPAddr).Port
	real := portSource
	var once sync.Once
	portsMu.Lock()
	portSource = func() (int, error) {
		port := 0
		once.Do(func() { port = taken })
		if port != 0 {
			return port, nil
		}
		return real()
	}
	portsMu.Unlock()
	t.Cleanup(func() {
		portsMu.Lock()
		portSource = real
		portsMu.Unlock()
	})
	return taken
}

// logOf returns the whole log at path, lowercased.
func logOf(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(string(b))
}

func TestPortClashRetry(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		taken := occupyNextPort(t)
		s := Redis(t, nil)
		if strings.HasSuffix(s.Addr(), ":"+strconv.Itoa(taken)) {
			t.Fatalf("redis got the taken port %d", taken)
		}
		if !strings.Contains(logOf(t, s.logPath), "address already in use") {
			t.Fatal("no clash in the log: the test did not provoke one")
		}
	})
	t.Run("postgres", func(t *testing.T) {
		taken := occupyNextPort(t)
		s := Postgres(t)
		if strings.HasSuffix(s.Addr(), ":"+strconv.Itoa(taken)) {
			t.Fatalf("postgres got the taken port %d", taken)
		}
		if !strings.Contains(logOf(t, s.logPath), "address already in use") {
			t.Fatal("no clash in the log: the test did not provoke one")
		}
	})
	t.Run("etcd", func(t *testing.T) {
		taken := occupyNextPort(t)
		s := Etcd(t)
		if strings.Contains(s.Endpoints()[0], ":"+strconv.Itoa(taken)) {
			t.Fatalf("etcd got the taken port %d", taken)
		}
		if !strings.Contains(logOf(t, s.members[0].logPath), "address already in use") {
			t.Fatal("no clash in the log: the test did not provoke one")
		}
	})
}
