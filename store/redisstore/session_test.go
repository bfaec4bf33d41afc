package redisstore_test

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/session"
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

func sessionHooks(tg *sessiontest.Target, direct *redisstore.Store, dc rueidis.Client) {
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
