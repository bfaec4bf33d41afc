package bench

import (
	"context"
	"errors"
	"strconv"
	"testing"

	scsredis "github.com/alexedwards/scs/redisstore"
	scs "github.com/alexedwards/scs/v2"

	"github.com/tenurekit/tenure/session"
)

// BenchmarkRedisSession measures load+idle-refresh cycles per second on one
// Redis for each of SessionContenders at 1 and 50 workers.
//
//	go test -run '^$' -bench RedisSession
func BenchmarkRedisSession(b *testing.B) {
	for _, c := range SessionContenders {
		b.Run(c, func(b *testing.B) {
			for _, w := range Workers {
				b.Run("workers="+strconv.Itoa(w), func(b *testing.B) { env.SessionCycle(b, c, w) })
			}
		})
	}
}

// TestLostLogout reproduces the anchor's lost-logout race on scs (with its
// Redis store and an idle timeout) and shows that tenure does not have it:
// request A loads the session, request B logs out, A commits at the end of
// its request without having changed anything.
func TestLostLogout(t *testing.T) {
	r, err := env.Redis()
	if errors.Is(err, ErrSkipped) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs, err := r.sessionContenders(ctx)
	if err != nil {
		t.Fatal(err)
	}

	sm := scs.New()
	sm.Store = scsredis.NewWithPrefix(cs.pool, "bench:lost-logout:")
	sm.IdleTimeout = sessionIdle
	c0, _ := sm.Load(ctx, "")
	sm.Put(c0, "user", "alice")
	tok, _, err := sm.Commit(c0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := sm.Load(ctx, tok) // A loads
	b, _ := sm.Load(ctx, tok) // B loads and logs out
	if err := sm.Destroy(b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sm.Commit(a); err != nil { // A's read-only request ends
		t.Fatal(err)
	}
	after, _ := sm.Load(ctx, tok)
	if sm.GetString(after, "user") != "alice" {
		t.Fatal("scs did not revive the logged-out session (the anchor's reproduction no longer holds)")
	}
	t.Log("scs: the logged-out token is logged in again after A's commit")

	m := cs.manager
	ttok, _, err := m.Create(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := m.Load(ctx, ttok)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Revoke(ctx, ta.ID()); err != nil {
		t.Fatal(err)
	}
	if err := m.Touch(ctx, ta); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("tenure late touch: %v", err)
	}
	if err := m.Save(ctx, ta); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("tenure late save: %v", err)
	}
	if _, err := m.Load(ctx, ttok); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("tenure: the logged-out session is back: %v", err)
	}
}
