package redisstore

import (
	"context"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// The confirming command is chosen per primary from what it reports:
// WAITAOF 1 N only where the server has it and runs with appendonly yes,
// and never with ConfirmWait.
func TestWaitCommandChoice(t *testing.T) {
	for _, c := range []struct {
		waitAOF, aof bool
		cmd          ConfirmCommand
		want         string
	}{
		{false, false, ConfirmAuto, "WAIT 2 1000"},
		{false, true, ConfirmAuto, "WAIT 2 1000"}, // Redis before 7.2
		{true, false, ConfirmAuto, "WAIT 2 1000"}, // no append-only file to sync
		{true, true, ConfirmAuto, "WAITAOF 1 2 1000"},
		{true, true, ConfirmWait, "WAIT 2 1000"},
	} {
		s := &Store{}
		s.repl = newReplConfig(Replication{Command: c.cmd})
		cmd, aof := s.waitCmd(&replNode{waitAOF: c.waitAOF, aof: c.aof}, 2)
		got := strings.Join(append([]string{cmd.Name}, cmd.Args...), " ")
		if got != c.want || aof != (cmd.Name == "WAITAOF") {
			t.Errorf("waitAOF %v, aof %v, %v: %q (aof %v), want %q", c.waitAOF, c.aof, c.cmd, got, aof, c.want)
		}
	}
}

// Replies of WAIT (an integer) and WAITAOF (local, replicas) are read on
// both clients; a WAITAOF reply is made by a script here, since the
// server may be older than 7.2.
func TestParseWait(t *testing.T) {
	srv := testenv.SharedRedis(t)
	eachForm(t, func(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
		s := open(t, srv.Addr(), nil)
		ctx := context.Background()
		aof := rclient.NewScript("return {1, 3}")
		acked, local, err := parseWait(aof.Exec(ctx, s.c, []string{"{t}"}, nil), true)
		if err != nil || acked != 3 || local != 1 {
			t.Fatalf("WAITAOF reply: %d replicas, %d local, %v", acked, local, err)
		}
		acked, _, err = parseWait(s.c.Do(ctx, rclient.Cmd{Name: "WAIT", Args: []string{"0", "0"}}), false)
		if err != nil || acked != 0 {
			t.Fatalf("WAIT reply: %d, %v", acked, err)
		}
		if _, _, err := parseWait(rclient.NewScript("return {1}").Exec(ctx, s.c, []string{"{t}"}, nil), true); err == nil {
			t.Fatal("a WAITAOF reply of one element was accepted")
		}
	})
}

// INFO replication: only replicas listed as online count; those still
// syncing are connected but not waited for.
func TestCountReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=10.0.0.1,port=6379,state=online,offset=100,lag=0\r\n" +
		"slave1:ip=10.0.0.2,port=6379,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave2:ip=10.0.0.3,port=6379,state=online,offset=100,lag=1\r\n" +
		"slave_read_repl_offset:0\r\nmaster_repl_offset:100\r\n"
	if online, connected := countReplicas(info); online != 2 || connected != 3 {
		t.Fatalf("countReplicas = %d online, %d connected; want 2, 3", online, connected)
	}
}

// The marker confirmState writes shares the hash tag of the key it
// confirms and no key family of the store.
func TestSyncKey(t *testing.T) {
	s := &Store{prefix: "p:"}
	for key, want := range map[string]string{
		"p:idem{5:scopekey}":  "p:sync{5:scopekey}",
		"p:{s:ab12}:s:deadbe": "p:sync{s:ab12}",
		"p:{lease}:lock":      "p:sync{lease}",
		"no-tag":              "p:sync",
	} {
		if got := s.syncKey(key); got != want {
			t.Errorf("syncKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// A confirmed write follows MOVED and ASK itself; other replies are not
// redirections.
func TestRedirected(t *testing.T) {
	srv := testenv.SharedRedis(t)
	eachForm(t, func(t *testing.T, open func(t *testing.T, addr string, o *Options) *Store) {
		s := open(t, srv.Addr(), nil)
		ctx := context.Background()
		for reply, want := range map[string]struct {
			addr    string
			ask, ok bool
		}{
			"MOVED 3999 127.0.0.1:6381": {"127.0.0.1:6381", false, true},
			"ASK 3999 10.0.0.2:7000":    {"10.0.0.2:7000", true, true},
			"ERR something else":        {"", false, false},
		} {
			err := rclient.NewScript("return redis.error_reply(ARGV[1])").Exec(ctx, s.c, []string{"{t}"}, []string{reply}).Error()
			addr, ask, ok := redirected(err)
			if addr != want.addr || ask != want.ask || ok != want.ok {
				t.Errorf("%q: %q, ask %v, ok %v; want %+v", reply, addr, ask, ok, want)
			}
		}
		if _, _, ok := redirected(nil); ok {
			t.Error("no error is a redirection")
		}
	})
}
