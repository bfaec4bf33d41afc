package sessiontest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

// A request A loads and modifies the session; request B logs out; A's save
// at the end of its request must not bring the session back.
func testLateSaveAfterLogoutModified(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, _ := create(t, m, u, map[string]string{"role": "user"})
	a := load(t, m, tok)
	a.Set("role", "admin")
	b := load(t, m, tok)
	if err := m.Revoke(ctx, b.ID()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	wantErr(t, "late Save", m.Save(ctx, a), session.ErrNotFound)
	_, err := m.Rotate(ctx, a)
	wantErr(t, "late Rotate", err, session.ErrNotFound)
	wantGone(t, tg, m, tok, u)
	if p, ok := present(t, tg, session.TokenID(tok)); ok && p {
		t.Fatal("the store still holds a record of the revoked session")
	}
}

// The same with a request that only read: neither its late save nor its
// late idle refresh revives the session (scs with an idle timeout does).
func testLateSaveAfterLogoutReadOnly(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, _ := create(t, m, u, nil)
	a := load(t, m, tok)
	if err := m.Revoke(ctx, session.TokenID(tok)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	wantErr(t, "late Touch", m.Touch(ctx, a), session.ErrNotFound)
	wantErr(t, "late Save", m.Save(ctx, a), session.ErrNotFound)
	_, err := tg.Store.Load(ctx, session.TokenID(tok), time.Minute)
	wantErr(t, "late Load with refresh", err, session.ErrNotFound)
	wantGone(t, tg, m, tok, u)
	if p, ok := present(t, tg, session.TokenID(tok)); ok && p {
		t.Fatal("the store still holds a record of the revoked session")
	}
}

// B rotates (with a change); A, which loaded before, saves under the old
// token: the old token stays dead and the new one keeps B's change only.
func testLateSaveAfterRotation(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	old, _ := create(t, m, u, map[string]string{"by": "none"})
	a := load(t, m, old)
	b := load(t, m, old)
	b.Set("by", "B")
	tok, err := m.Rotate(ctx, b)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if session.TokenID(tok) == session.TokenID(old) || b.ID() != session.TokenID(tok) || b.Version() != 2 || b.Modified() {
		t.Fatalf("after Rotate: id changed %v, session id is new token's %v, version %d, modified %v",
			session.TokenID(tok) != session.TokenID(old), b.ID() == session.TokenID(tok), b.Version(), b.Modified())
	}
	a.Set("by", "A")
	wantErr(t, "late Save under the old token", m.Save(ctx, a), session.ErrNotFound)
	wantErr(t, "late Touch under the old token", m.Touch(ctx, a), session.ErrNotFound)
	_, err = m.Rotate(ctx, a)
	wantErr(t, "late Rotate of the old token", err, session.ErrNotFound)
	wantGone(t, tg, m, old, u)
	got := load(t, m, tok)
	if got.Values()["by"] != "B" || got.Version() != 2 {
		t.Fatalf("new token: values %v, version %d; want B's change at version 2", got.Values(), got.Version())
	}
	if got := ids(list(t, tg.Direct, u)); !slices.Equal(got, []session.ID{session.TokenID(tok)}) {
		t.Fatalf("List = %v, want only the new session", got)
	}
	if p, ok := present(t, tg, session.TokenID(old)); ok && p {
		t.Fatal("the store still holds a record under the old token")
	}
}

func testRevokeIsFinal(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, s := create(t, m, u, nil)
	other, _ := create(t, m, u, nil)
	if err := m.Revoke(ctx, s.ID()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	wantErr(t, "second Revoke", m.Revoke(ctx, s.ID()), session.ErrNotFound)
	wantGone(t, tg, m, tok, u)
	if got := ids(list(t, tg.Direct, u)); !slices.Equal(got, []session.ID{session.TokenID(other)}) {
		t.Fatalf("List = %v, want only the other session", got)
	}
	load(t, m, other)
}

// RevokeUser is atomic with respect to Create: every session whose Create
// returned before RevokeUser began is dead afterwards, every session
// created after it returned is alive, and List agrees with Load.
func testRevokeUserRacingCreate(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	var (
		mu   sync.Mutex
		made []created
	)
	record := func() {
		c := created{invoked: time.Now()}
		tok, _, err := m.Create(ctx, u, nil)
		c.settled = time.Now()
		if err != nil {
			t.Errorf("Create: %v", err)
			return
		}
		c.tok = tok
		mu.Lock()
		made = append(made, c)
		mu.Unlock()
	}
	for range 5 {
		record()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // creators end before the test does, even when it fails early
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				record()
			}
		})
	}
	for {
		mu.Lock()
		n := len(made)
		mu.Unlock()
		if n >= 25 {
			break
		}
		if t.Failed() || ctx.Err() != nil {
			t.FailNow()
		}
		time.Sleep(time.Millisecond)
	}
	revStart := time.Now()
	n, err := m.RevokeUser(ctx, u)
	revEnd := time.Now()
	if err != nil {
		t.Fatalf("RevokeUser: %v", err)
	}
	for {
		mu.Lock()
		after := 0
		for _, c := range made {
			if c.invoked.After(revEnd) {
				after++
			}
		}
		mu.Unlock()
		if after >= 5 {
			break
		}
		if t.Failed() || ctx.Err() != nil {
			t.FailNow()
		}
		time.Sleep(time.Millisecond)
	}
	halt()
	before, alive := 0, map[session.ID]bool{}
	for _, c := range made {
		_, err := m.Load(ctx, c.tok)
		if err != nil && !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("Load: %v", err)
		}
		switch {
		case c.settled.Before(revStart):
			before++
			if err == nil {
				t.Errorf("a session created before RevokeUser began survived it")
			}
		case c.invoked.After(revEnd):
			if err != nil {
				t.Errorf("a session created after RevokeUser returned is dead: %v", err)
			}
		}
		if err == nil {
			alive[session.TokenID(c.tok)] = true
		}
	}
	if n < before {
		t.Errorf("RevokeUser reports %d sessions ended, but %d existed before it began", n, before)
	}
	got := ids(list(t, tg.Direct, u))
	want := slices.Sorted(maps.Keys(alive))
	if !slices.Equal(got, want) {
		t.Fatalf("List shows %d sessions, Load finds %d alive", len(got), len(want))
	}
	t.Logf("%d sessions, %d created before RevokeUser (which ended %d), %d alive after", len(made), before, n, len(alive))
}

// RevokeUser is atomic with respect to Rotate: no session that existed
// before RevokeUser began survives it under a rotated token. A rotation
// must land inside the revoke for the case to say anything, so it races
// over several rounds.
func testRevokeUserRacingRotate(t *testing.T, tg Target) {
	m := manager(t, tg.Store, long, long)
	for round := range 20 {
		if t.Failed() {
			return
		}
		revokeRacingRotate(t, tg, m, user(t, fmt.Sprintf("u%d", round)))
	}
}

func revokeRacingRotate(t *testing.T, tg Target, m *session.Manager, u string) {
	ctx := ctxT(t)
	const n = 6
	var (
		mu   sync.Mutex
		toks []session.Token
	)
	sessions := make([]*session.Session, n)
	for i := range sessions {
		var tok session.Token
		tok, sessions[i] = create(t, m, u, nil)
		toks = append(toks, tok)
	}
	start := make(chan struct{})
	var (
		wg      sync.WaitGroup
		revoked atomic.Bool
		abort   atomic.Bool
	)
	defer func() { abort.Store(true); wg.Wait() }() // rotators end before the test does
	for i := range sessions {
		wg.Go(func() {
			<-start
			for !abort.Load() {
				after := revoked.Load()
				tok, err := m.Rotate(ctx, sessions[i])
				if errors.Is(err, session.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("Rotate: %v", err)
					return
				}
				mu.Lock()
				toks = append(toks, tok)
				mu.Unlock()
				if after {
					t.Errorf("a rotation begun after RevokeUser returned succeeded")
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(5 * time.Millisecond)
	if _, err := m.RevokeUser(ctx, u); err != nil {
		t.Fatalf("RevokeUser: %v", err)
	}
	revoked.Store(true)
	wg.Wait()
	for _, tok := range toks {
		if _, err := m.Load(ctx, tok); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("a session rotated while RevokeUser ran survived it: Load = %v", err)
		}
	}
	if recs := list(t, tg.Direct, u); len(recs) != 0 {
		t.Fatalf("List after RevokeUser: %d sessions", len(recs))
	}
	if extra := len(toks) - n; extra > 0 {
		t.Logf("%d tokens issued by rotation before RevokeUser ended them", extra)
	}
}

// A revoke racing saves, idle refreshes and rotations leaves either no
// record or a whole one, never a partial record (Spring Session #2021).
func testRevokeRacingWrites(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	for range 10 {
		tok, s := create(t, m, u, map[string]string{"k": "v"})
		a, b, c := load(t, m, tok), load(t, m, tok), load(t, m, tok)
		a.Set("k", "a")
		var (
			wg        sync.WaitGroup
			revokeErr error
			rotateErr error
		)
		wg.Go(func() { revokeErr = m.Revoke(ctx, s.ID()) })
		wg.Go(func() { _ = m.Save(ctx, a) })
		wg.Go(func() { _ = m.Touch(ctx, b) })
		wg.Go(func() { _, rotateErr = m.Rotate(ctx, c) })
		wg.Wait()
		if revokeErr == nil {
			wantGone(t, tg, m, tok, u)
			if p, ok := present(t, tg, session.TokenID(tok)); ok && p {
				t.Fatal("a record is left after a revoke that raced writes")
			}
		}
		if rotateErr == nil && revokeErr == nil {
			// The rotation came first and the revoke ended the old token
			// only if it ran later: then it would have failed. Both
			// succeeding means the revoke ran first and the rotation
			// after, on a revoked session.
			t.Fatal("both Revoke and Rotate of one session succeeded")
		}
	}
	for _, r := range list(t, tg.Direct, u) {
		if r.UserID != u || r.Version < 2 || !r.AbsoluteUntil.After(r.Created) || !r.IdleUntil.After(r.Created) {
			t.Fatalf("partial record: %+v", r)
		}
		var v map[string]string
		if err := json.Unmarshal(r.Data, &v); err != nil || (v["k"] != "v" && v["k"] != "a") {
			t.Fatalf("corrupt data %q: %v", r.Data, err)
		}
		if err := m.Revoke(ctx, r.ID); err != nil {
			t.Fatalf("Revoke of a rotated survivor: %v", err)
		}
	}
}
