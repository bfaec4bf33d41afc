package redisstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// dumpKeys returns every key under prefix with its value (hashes, sorted
// sets) on a single server.
func dumpKeys(t *testing.T, c rueidis.Client, prefix string) string {
	ctx := ctxT(t)
	keys, err := c.Do(ctx, c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\n")
		typ, _ := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		switch typ {
		case "hash":
			m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
			for f, v := range m {
				b.WriteString("  " + f + "=" + v + "\n")
			}
		case "zset":
			ms, _ := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
			b.WriteString("  " + strings.Join(ms, " ") + "\n")
		}
	}
	return b.String()
}

// sessionHooks sets the hooks of a session target: s is the store under
// test (behind the target's faults), direct a store on the same data that
// the faults do not touch, dc a client of direct's.
func sessionHooks(tg *sessiontest.Target, s, direct *redisstore.Store, dc rueidis.Client) {
	tg.LagCleanup = func(t *testing.T, id session.ID) {
		if err := dc.Do(ctxT(t), dc.B().Persist().Key(direct.SessionKey(id)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	tg.Present = func(t *testing.T, id session.ID) bool {
		n, err := dc.Do(ctxT(t), dc.B().Exists().Key(direct.SessionKey(id)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	tg.Commit = committer{s: s, direct: direct}
	// Sessions expire natively with their keys.
	tg.Retained = &sessiontest.Retained{Reclaim: func(*testing.T) {}}
}

// committer is the suite's Committer on SessionSet: the commit through the
// store under test, the read through the direct one.
type committer struct{ s, direct *redisstore.Store }

// Commit holds before the script: check and write are one step.
func (c committer) Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error {
	if hold != nil {
		hold()
	}
	return c.s.SessionSet(ctx, id, version, userID, name, []byte(value))
}

func (c committer) Read(ctx context.Context, userID, name string) (string, bool, error) {
	v, ok, err := c.direct.SessionGet(ctx, userID, name)
	return string(v), ok, err
}

// A user's session keys and index share one slot.
func TestSessionKeysShareSlot(t *testing.T) {
	s := newRedis(t, newClient(t, testenv.SharedRedis(t).Addr()), &redisstore.Options{Prefix: "p{x}:"})
	m, err := session.New(s.Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob{1}", "c:d"} {
		tok, _, err := m.Create(ctxT(t), u, nil)
		if err != nil {
			t.Fatal(err)
		}
		sk, ik, rk := s.SessionKey(session.TokenID(tok)), s.SessionIndexKey(u), s.SessionRevokeKey(u)
		if testenv.KeySlot(sk) != testenv.KeySlot(ik) || testenv.KeySlot(sk) != testenv.KeySlot(rk) {
			t.Fatalf("user %q: session key %s (slot %d), index %s (slot %d) and revoke marks %s (slot %d) differ",
				u, sk, testenv.KeySlot(sk), ik, testenv.KeySlot(ik), rk, testenv.KeySlot(rk))
		}
	}
}

// A revoke-all that dies after its first step leaves a mark that keeps the
// sessions it covers from escaping by rotation, expires with the last of
// their absolute deadlines, and leaves sessions created later alone.
func TestSessionInterruptedRevoke(t *testing.T) {
	ctx := ctxT(t)
	dc := newClient(t, testenv.SharedRedis(t).Addr())
	s := newRedis(t, dc, &redisstore.Options{Prefix: "revoke:" + rand.Text()[:8] + ":"})
	m, err := session.New(s.Sessions(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const u = "alice"
	old, _, err := m.Create(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeBegin(ctx, u); err != nil {
		t.Fatal(err)
	}
	// The next session is created after the mark's instant, on the
	// server's clock: wait until TIME has passed it.
	marks, err := dc.Do(ctx, dc.B().Zrange().Key(s.SessionRevokeKey(u)).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil || len(marks) != 1 {
		t.Fatalf("revoke marks after the first step: %v (%v), want one", marks, err)
	}
	for {
		tm, err := dc.Do(ctx, dc.B().Time().Build()).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		if float64(tm[0]*1000+tm[1]/1000) > marks[0].Score {
			break
		}
	}
	newer, _, err := m.Create(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	sOld, err := m.Load(ctx, old)
	if err != nil {
		t.Fatalf("Load of the covered session: %v", err)
	}
	if _, err := m.Rotate(ctx, sOld); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Rotate of a session the revoke covers = %v, want ErrNotFound", err)
	}
	sNew, err := m.Load(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rotate(ctx, sNew); err != nil {
		t.Fatalf("Rotate of a session created after the revoke: %v", err)
	}
	ttl, err := dc.Do(ctx, dc.B().Pttl().Key(s.SessionRevokeKey(u)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < int64(time.Hour/time.Millisecond) || ttl > int64(2*time.Hour/time.Millisecond) {
		t.Fatalf("revoke marks expire in %dms, want the last absolute deadline (~2h)", ttl)
	}
	// A complete revoke ends both and drops its own mark only.
	n, err := m.RevokeUser(ctx, u)
	if err != nil || n != 2 {
		t.Fatalf("RevokeUser = %d, %v; want 2 sessions", n, err)
	}
	left, err := dc.Do(ctx, dc.B().Zcard().Key(s.SessionRevokeKey(u)).Build()).AsInt64()
	if err != nil || left != 1 {
		t.Fatalf("revoke marks left: %d (%v), want the interrupted one only", left, err)
	}
}

// SessionSet refuses bad input with session.ErrInvalid before sending
// anything (on a store whose path is cut), and writes nothing.
func TestSessionSetRefusesBadInput(t *testing.T) {
	ctx := ctxT(t)
	srv := testenv.SharedRedis(t)
	prefix := "sessset:" + rand.Text()[:8] + ":"
	p := testenv.NewProxy(t, srv.Addr())
	cut := checked(t, newProxiedClient(t, p.Addr()), &redisstore.Options{Prefix: prefix})
	dc := newClient(t, srv.Addr())
	s := checked(t, dc, &redisstore.Options{Prefix: prefix})
	direct := newRedis(t, newClient(t, srv.Addr()), &redisstore.Options{Prefix: prefix})
	m, err := session.New(direct.Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const u = "alice"
	tok, _, err := m.Create(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := session.TokenID(tok)
	other := "bob"
	for i := 0; sessiondriver.UserShard(other) == sessiondriver.UserShard(u); i++ {
		other = fmt.Sprintf("bob%d", i)
	}
	cases := []struct {
		what       string
		id         session.ID
		version    uint64
		user, name string
		value      []byte
	}{
		{"malformed session ID", "not-an-id", 0, u, "balance", nil},
		{"upper-case session ID", session.ID(strings.ToUpper(string(id))), 0, u, "balance", nil},
		{"session ID of another user's shard", id, 0, other, "balance", nil},
		{"empty user ID", id, 0, "", "balance", nil},
		{"user ID with NUL", id, 0, "al\x00ice", "balance", nil},
		{"user ID too long", id, 0, strings.Repeat("a", sessiondriver.MaxUserIDLen+1), "balance", nil},
		{"version out of range", id, 1<<62 + 1, u, "balance", nil},
		{"empty name", id, 0, u, "", nil},
		{"name too long", id, 0, u, strings.Repeat("n", 256), nil},
		{"name not UTF-8", id, 0, u, "bal\xffance", nil},
		{"name with a newline", id, 0, u, "bal\nance", nil},
		{"name with NUL", id, 0, u, "bal\x00ance", nil},
		{"name with DEL", id, 0, u, "bal\x7fance", nil},
		{"name with a C1 control", id, 0, u, "bal\u0085ance", nil},
		{"value too long", id, 0, u, "balance", make([]byte, redisstore.MaxSessionValueLen+1)},
	}
	p.Cut()
	for _, tc := range cases {
		err := cut.SessionSet(ctx, tc.id, tc.version, tc.user, tc.name, tc.value)
		if !errors.Is(err, session.ErrInvalid) || errors.Is(err, session.ErrUnavailable) {
			t.Errorf("%s: SessionSet = %v, want session.ErrInvalid before anything is sent", tc.what, err)
		}
	}
	for _, tc := range cases {
		n, err := dc.Do(ctx, dc.B().Exists().Key(direct.SessionValueKey(tc.user, tc.name)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: the refused SessionSet wrote its value", tc.what)
		}
	}
	for _, name := range []string{"", "a\nb", "a\xff"} {
		if _, _, err := cut.SessionGet(ctx, u, name); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("SessionGet of name %q = %v, want session.ErrInvalid", name, err)
		}
	}
	if _, _, err := cut.SessionGet(ctx, "", "balance"); !errors.Is(err, session.ErrInvalid) {
		t.Errorf("SessionGet of an empty user ID = %v, want session.ErrInvalid", err)
	}
	if keys := dbKeys(t, dc, prefix); len(keys) != 2 {
		t.Errorf("keys after the refusals: %v, want the session and its index only", keys)
	}

	// The largest value, any bytes, and the longest name are written; the
	// session is read, not refreshed.
	big := make([]byte, redisstore.MaxSessionValueLen)
	big[0], big[len(big)-1] = 0, 0xff
	long := strings.Repeat("é", 127) + "n"
	before, err := dc.Do(ctx, dc.B().Hgetall().Key(direct.SessionKey(id)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SessionSet(ctx, id, 1, u, long, big); err != nil {
		t.Fatalf("SessionSet of the longest name and value: %v", err)
	}
	got, ok, err := s.SessionGet(ctx, u, long)
	if err != nil || !ok || !bytes.Equal(got, big) {
		t.Fatalf("SessionGet = %d bytes, %v, %v; want the value written", len(got), ok, err)
	}
	if err := s.SessionSet(ctx, id, 0, u, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.SessionGet(ctx, u, "empty"); err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("SessionGet of an empty value = %q, %v, %v; want empty and present", got, ok, err)
	}
	if _, ok, err := s.SessionGet(ctx, u, "never"); err != nil || ok {
		t.Fatalf("SessionGet of a value never written: present %v, %v", ok, err)
	}
	after, err := dc.Do(ctx, dc.B().Hgetall().Key(direct.SessionKey(id)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Fatalf("SessionSet changed the session: %v, then %v", before, after)
	}

	// A session of another user, even in the same shard, is not found.
	seen := map[string]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		n := fmt.Sprintf("user%d", i)
		if prev, ok := seen[sessiondriver.UserShard(n)]; ok {
			a, b = prev, n
		}
		seen[sessiondriver.UserShard(n)] = n
	}
	atok, _, err := m.Create(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SessionSet(ctx, session.TokenID(atok), 0, b, "balance", []byte("1"))
	if !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("SessionSet with a session of another user of the shard = %v, want session.ErrNotFound", err)
	}
	if _, ok, _ := direct.SessionGet(ctx, b, "balance"); ok {
		t.Fatal("the refused SessionSet wrote its value")
	}

	// A revoke of the user's sessions in progress (its first step done)
	// has ended the sessions it covers.
	if err := direct.RevokeBegin(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := s.SessionSet(ctx, id, 0, u, "after", []byte("x")); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("SessionSet during a revoke-all = %v, want session.ErrNotFound", err)
	}
	if _, ok, _ := direct.SessionGet(ctx, u, "after"); ok {
		t.Fatal("SessionSet wrote during a revoke-all")
	}

	// Cut off: ErrUnavailable, for the read too.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := cut.SessionGet(short, u, "balance"); !errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("SessionGet while cut off = %v, want session.ErrUnavailable", err)
	}
}

// dbKeys returns the keys under prefix on a single server.
func dbKeys(t *testing.T, c rueidis.Client, prefix string) []string {
	t.Helper()
	keys, err := c.Do(ctxT(t), c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A value key is in the slot of its user's sessions, and no two (user,
// name) pairs share one.
func TestSessionValueKeyInSessionSlot(t *testing.T) {
	s := newRedis(t, newClient(t, testenv.SharedRedis(t).Addr()), &redisstore.Options{Prefix: "p{x}:"})
	m, err := session.New(s.Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob{1}", "c:d", "}{"} {
		tok, _, err := m.Create(ctxT(t), u, nil)
		if err != nil {
			t.Fatal(err)
		}
		sk := s.SessionKey(session.TokenID(tok))
		for _, name := range []string{"balance", "{n}", "a}b{c"} {
			vk := s.SessionValueKey(u, name)
			if testenv.KeySlot(vk) != testenv.KeySlot(sk) {
				t.Fatalf("user %q, name %q: value key %s (slot %d) and session key %s (slot %d) differ",
					u, name, vk, testenv.KeySlot(vk), sk, testenv.KeySlot(sk))
			}
		}
	}
	if s.SessionValueKey("a:1", "b") == s.SessionValueKey("a", "1:b") {
		t.Fatal("two (user, name) pairs share a value key")
	}
}
