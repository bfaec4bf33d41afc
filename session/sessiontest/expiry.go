package sessiontest

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

func testRotateKeepsAbsolute(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, 2*long)
	u := user(t, "u")
	old, s := create(t, m, u, map[string]string{"k": "v"})
	created, abs := s.Created(), s.AbsoluteUntil()
	tg.Advance(tg.Unit / 4)
	tok, err := m.Rotate(ctx, s)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	got := load(t, m, tok)
	if !got.AbsoluteUntil().Equal(abs) || !got.Created().Equal(created) {
		t.Fatalf("rotation moved created/absolute: %v/%v, was %v/%v", got.Created(), got.AbsoluteUntil(), created, abs)
	}
	if got.Version() != 2 || got.Values()["k"] != "v" || got.UserID() != u {
		t.Fatalf("rotated: version %d, values %v, user %q", got.Version(), got.Values(), got.UserID())
	}
	wantGone(t, tg, m, old, u)
}

// Constant activity and repeated rotations never carry a session past its
// absolute deadline: idle refreshes are capped by it and rotation keeps it.
// On a real clock a loaded machine can make the refreshes slower than the
// idle timeout, so that the session idles out first: such a round proves
// nothing and is run again (at most five times).
func testAbsoluteUnderActivity(t *testing.T, tg Target) {
	for range 5 {
		if absoluteUnderActivity(t, tg) {
			return
		}
		t.Logf("the session idled out between two refreshes slower than its idle timeout; running the case again")
	}
	t.Fatal("five rounds in a row, the refreshes were slower than the idle timeout: the case could not keep a session active")
}

// absoluteUnderActivity runs one round; false when the session may have
// idled out: the load that found it gone returned more than the idle
// timeout after the last refresh was sent.
func absoluteUnderActivity(t *testing.T, tg Target) bool {
	ctx := ctxT(t)
	idle, absolute := tg.Unit, 4*tg.Unit
	m := manager(t, tg.Store, idle, absolute)
	u := user(t, "u")
	tok, s := create(t, m, u, nil)
	abs := s.AbsoluteUntil()
	step := max(tg.Unit/8, time.Millisecond)
	var waited time.Duration
	wall := time.Now()
	lastRefresh := wall // the send time of the last request that refreshed the idle deadline
	loads := 0
	for i := 0; ; i++ {
		sent := time.Now()
		cur, err := m.Load(ctx, tok)
		if errors.Is(err, session.ErrNotFound) {
			// The store judged this load when it ran, at most now, and
			// the last refresh when it ran, at least at its send: only
			// when those can be an idle timeout apart may the session
			// have idled out.
			if loads < 3 && time.Since(lastRefresh) >= idle {
				return false
			}
			break
		}
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		lastRefresh = sent
		loads++
		if !cur.AbsoluteUntil().Equal(abs) {
			t.Fatalf("absolute deadline moved from %v to %v", abs, cur.AbsoluteUntil())
		}
		if cur.IdleUntil().After(abs) {
			t.Fatalf("idle refresh to %v, past the absolute deadline %v", cur.IdleUntil(), abs)
		}
		if i%3 == 2 {
			old := tok
			if tok, err = m.Rotate(ctx, cur); errors.Is(err, session.ErrNotFound) {
				tok = old
				break
			} else if err != nil {
				t.Fatalf("Rotate: %v", err)
			}
			if _, err := m.Load(ctx, old); !errors.Is(err, session.ErrNotFound) {
				t.Fatalf("Load of the token before rotation: %v, want ErrNotFound", err)
			}
		}
		if waited > absolute+4*tg.Unit || time.Since(wall) > absolute+50*tg.Unit+10*time.Second {
			t.Fatalf("the session is still alive %v (store clock) / %v (wall) after creation; absolute timeout %v",
				waited, time.Since(wall), absolute)
		}
		tg.Advance(step)
		waited += step
	}
	if loads < 3 {
		t.Fatalf("only %d loads succeeded, each sent within the idle timeout of the one before: the session ended early", loads)
	}
	wantGone(t, tg, m, tok, u)
	if recs := list(t, tg.Direct, u); len(recs) != 0 {
		t.Fatalf("List after the absolute deadline: %+v", recs)
	}
	return true
}

// Idle expiry is judged at every read on the store's clock, even when the
// store's own cleanup (TTL, sweep) has not removed the record yet.
func testIdleExpiryCleanupLags(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, tg.Unit, long)
	u := user(t, "u")
	// The session as Create returned it: a load now could already find it
	// idled out on a busy machine (its idle timeout is one unit).
	tok, s := create(t, m, u, nil)
	if tg.LagCleanup != nil {
		tg.LagCleanup(t, session.TokenID(tok))
	}
	step := max(tg.Unit/8, time.Millisecond)
	var waited time.Duration
	wall := time.Now()
	for len(list(t, tg.Direct, u)) > 0 {
		if waited > 4*tg.Unit && time.Since(wall) > 50*tg.Unit+10*time.Second {
			t.Fatalf("session still listed %v after its idle timeout %v", time.Since(wall), tg.Unit)
		}
		tg.Advance(step)
		waited += step
	}
	if tg.LagCleanup != nil {
		if p, ok := present(t, tg, session.TokenID(tok)); ok && !p {
			t.Fatal("the store removed the record although its cleanup was made to lag: the test shows nothing")
		}
	}
	_, err := m.Load(ctx, tok)
	wantErr(t, "Load after idle expiry", err, session.ErrNotFound)
	wantErr(t, "Touch after idle expiry", m.Touch(ctx, s), session.ErrNotFound)
	s.Set("k", "v")
	wantErr(t, "Save after idle expiry", m.Save(ctx, s), session.ErrNotFound)
	_, err = m.Rotate(ctx, s)
	wantErr(t, "Rotate after idle expiry", err, session.ErrNotFound)
	wantGone(t, tg, m, tok, u)
}
