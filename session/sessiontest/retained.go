package sessiontest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

// Retained reaches what a store keeps of sessions that ended, for the case
// that checks a session is kept until its idle or absolute deadline, or its
// revocation, and no longer (docs/operations.md, "Retention: nothing grows
// without bound"). The case reads what the store holds with
// Target.Present, which it then needs too.
type Retained struct {
	// Reclaim lets the store drop the sessions that ended before the
	// call, the way it does that on its own: its sweep (SQLite,
	// PostgreSQL), the writes that sweep (memory), nothing where keys
	// expire natively (Redis). The case calls it again until the sessions
	// are gone or its deadline passes.
	Reclaim func(t *testing.T)
	// UserState, when set, reports whether the store still keeps a
	// record of its own for user (a per-user row or index) beyond the
	// user's sessions. Once every session of a user ended and the store
	// reclaimed them, it must report false.
	UserState func(t *testing.T, user string) bool
}

func needRetained(t *testing.T, tg Target) *Retained {
	t.Helper()
	if tg.Retained == nil || tg.Retained.Reclaim == nil || tg.Present == nil {
		t.Skip("sessiontest: the Target does not reach what the store keeps of ended sessions (Retained and Present)")
	}
	return tg.Retained
}

// testEndedSessionsLeaveNoState: many sessions of many users that ended
// (idle, past their absolute deadline, revoked, revoked with their user,
// rotated away) leave nothing in the store once it has reclaimed them,
// while live sessions (those rotated to included) are kept and still load.
func testEndedSessionsLeaveNoState(t *testing.T, tg Target) {
	r := needRetained(t, tg)
	ctx := ctxT(t)
	idle := manager(t, tg.Store, tg.Unit, long)
	absolute := manager(t, tg.Store, long, tg.Unit)
	live := manager(t, tg.Store, long, 2*long)
	const perUser = 4
	type sess struct {
		tok  session.Token
		user string
	}
	var gone, kept []sess
	add := func(m *session.Manager, group string, n int) []sess {
		var out []sess
		var u string
		for i := range n {
			if i%perUser == 0 {
				u = user(t, fmt.Sprintf("%s%d", group, i/perUser))
			}
			tok, _ := create(t, m, u, map[string]string{"n": fmt.Sprint(i)})
			out = append(out, sess{tok, u})
		}
		return out
	}
	gone = append(gone, add(idle, "idle", 60)...)
	gone = append(gone, add(absolute, "absolute", 60)...)
	for _, s := range add(live, "revoked", 20) {
		if err := live.Revoke(ctx, session.TokenID(s.tok)); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
		gone = append(gone, s)
	}
	byUser := add(live, "user", 2*perUser)
	for _, u := range []string{byUser[0].user, byUser[perUser].user} {
		if n, err := live.RevokeUser(ctx, u); err != nil || n != perUser {
			t.Fatalf("RevokeUser = %d, %v; want %d", n, err, perUser)
		}
	}
	gone = append(gone, byUser...)
	for _, s := range add(live, "rotated", 12) {
		cur := load(t, live, s.tok)
		tok, err := live.Rotate(ctx, cur)
		if err != nil {
			t.Fatalf("Rotate: %v", err)
		}
		gone = append(gone, s)
		kept = append(kept, sess{tok, s.user})
	}
	kept = append(kept, add(live, "live", 12)...)
	for _, s := range kept {
		if !tg.Present(t, session.TokenID(s.tok)) {
			t.Fatal("Present reports no record for a live session: the hook sees nothing")
		}
	}
	// Past every idle and absolute deadline on the store's clock.
	tg.Advance(tg.Unit + max(tg.Unit/4, time.Millisecond))
	var left []session.ID
	for deadline := time.Now().Add(10*tg.Unit + 10*time.Second); ; {
		r.Reclaim(t)
		left = left[:0]
		for _, s := range gone {
			if id := session.TokenID(s.tok); tg.Present(t, id) {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d sessions ended and the store reclaimed them, it still holds %d of them (%s...)", len(gone), len(left), left[0].Short())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range kept {
		if !tg.Present(t, session.TokenID(s.tok)) {
			t.Fatalf("the live session %s was reclaimed", session.TokenID(s.tok).Short())
		}
	}
	for _, s := range gone {
		if _, err := live.Load(ctx, s.tok); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("Load of a reclaimed session: %v, want ErrNotFound", err)
		}
	}
	users := map[string][]session.ID{}
	for _, s := range gone {
		users[s.user] = nil
	}
	for _, s := range kept {
		users[s.user] = append(users[s.user], session.TokenID(s.tok))
		if got := load(t, live, s.tok); got.UserID() != s.user {
			t.Fatalf("the live session loads for user %q, want %q", got.UserID(), s.user)
		}
	}
	for u, want := range users {
		if r.UserState != nil && len(want) == 0 && r.UserState(t, u) {
			t.Fatalf("every session of user %q ended and was reclaimed, but the store still keeps a record of the user", u)
		}
		slices.Sort(want)
		if got := ids(list(t, tg.Direct, u)); !slices.Equal(got, want) {
			t.Fatalf("List(%q) after reclaiming = %v, want %v", u, got, want)
		}
	}
}
