// Package sessiontest is the conformance suite every session.Store must
// pass.
//
// Each store's tests call [Run] with a function that returns a [Target]:
// the store under test, an independent view of the same data, the means to
// cut it off from its server, and (where the store has them) hooks that
// make its own expiry cleanup lag and show what it really keeps. The suite
// drives the store through session.Manager, as applications do, and asserts
// what the store holds as well as what each call returns. A bug fixed in
// one store gets a case here.
package sessiontest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// Faults breaks and heals the path between a Store and its server.
type Faults interface {
	// Cut makes the server unreachable: requests fail.
	Cut()
	// Heal restores normal service.
	Heal()
}

// Target is one store under test.
type Target struct {
	// Store is the store under test; Faults act on it.
	Store session.Store
	// Direct is an independent view of the same data that Faults do not
	// touch. Default Store.
	Direct session.Store
	// Faults cuts the path between Store and its server. Required.
	Faults Faults
	// Advance lets d pass on the store's clock: a fake clock steps, a real
	// one sleeps. Default time.Sleep.
	Advance func(d time.Duration)
	// Unit is a short timeout the store keeps exactly (at least 1ms).
	// Default 200ms.
	Unit time.Duration
	// LagCleanup makes the store's own expiry cleanup of record id lag
	// (Redis: PERSIST the key). Nil for stores whose cleanup is a sweep that
	// the suite never runs (SQL rows stay until swept).
	LagCleanup func(t *testing.T, id session.ID)
	// Present reports whether the store physically still holds anything for
	// record id, live or not. Nil: the suite skips those checks.
	Present func(t *testing.T, id session.ID) bool
	// Dump returns everything the store holds about sessions (keys, rows,
	// values) as text. Nil: the suite skips those checks.
	Dump func(t *testing.T) string
	// Commit is the store's sensitive commit guarded by a session (SQL
	// stores: txn.Tx's CheckSession in the transaction that writes the
	// value; Redis: SessionSet; memory: WithSession). Nil for a store that
	// has none: the Commit cases fail, so a store that keeps sessions
	// must provide it. Faults act on it as on Store.
	Commit Committer
	// Retained, if set (with Present), reaches what the store keeps of
	// sessions that ended, for the case that checks they leave nothing
	// once the store has reclaimed them (EndedSessionsLeaveNoState;
	// skipped when nil).
	Retained *Retained
}

// Committer writes a business value only while a session is live, checked
// at the commit in the same atomic step.
type Committer interface {
	// Commit sets the value name of the session's user to value if session
	// id is live on the store's clock and, when version is not 0, still at
	// version; else it returns an error wrapping session.ErrNotFound
	// (revoked, rotated away, expired) or session.ErrConflict (another
	// version) and writes nothing. userID is the session's user.
	//
	// hold, when not nil, is called once between the session check and
	// the commit, with whatever the check holds in force (a row lock, the
	// write lock, a mutex). A store whose check and write are one atomic
	// step (a script) calls it before that step instead: a request that
	// was authorized, then delayed.
	Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error
	// Read returns the committed value name of userID ("" and false if
	// never written), from an independent view of the data.
	Read(ctx context.Context, userID, name string) (string, bool, error)
}

// Run runs the conformance suite. newTarget is called once per subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tg Target)
	}{
		{"CreateLoadSave", testCreateLoadSave},
		{"InvalidInputWritesNothing", testInvalidInput},
		{"LateSaveAfterLogoutModified", testLateSaveAfterLogoutModified},
		{"LateSaveAfterLogoutReadOnly", testLateSaveAfterLogoutReadOnly},
		{"LateSaveAfterRotation", testLateSaveAfterRotation},
		{"ConcurrentSavesOneWins", testConcurrentSaves},
		{"TouchIsCompareAndSet", testTouchCAS},
		{"RotateKeepsAbsoluteDeadline", testRotateKeepsAbsolute},
		{"AbsoluteDeadlineHoldsUnderActivityAndRotation", testAbsoluteUnderActivity},
		{"IdleExpiryHoldsWhenCleanupLags", testIdleExpiryCleanupLags},
		{"RevokeIsFinal", testRevokeIsFinal},
		{"RevokeUserRacingCreate", testRevokeUserRacingCreate},
		{"RevokeUserRacingRotate", testRevokeUserRacingRotate},
		{"RevokeRacingWritesLeavesNoPartialRecord", testRevokeRacingWrites},
		{"ListUsesPerUserIndex", testList},
		{"UsersListsLiveUsers", testUsers},
		{"StoredIDPresentedAsTokenFails", testStoredIDAsToken},
		{"TokensAbsentFromLogs", testTokensAbsentFromLogs},
		{"UnreachableIsErrUnavailable", testUnreachable},
		{"CommitChecksSession", testCommitChecks},
		{"CommitRacingRevoke", testCommitRacingRevoke},
		{"CommitRacingRevokeUser", testCommitRacingRevokeUser},
		{"CommitUnreachable", testCommitUnreachable},
		{"EndedSessionsLeaveNoState", testEndedSessionsLeaveNoState},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Store == nil || tg.Faults == nil {
				t.Fatal("sessiontest: Target needs Store and Faults")
			}
			if tg.Direct == nil {
				tg.Direct = tg.Store
			}
			if tg.Advance == nil {
				tg.Advance = time.Sleep
			}
			if tg.Unit <= 0 {
				tg.Unit = 200 * time.Millisecond
			}
			t.Cleanup(tg.Faults.Heal)
			tc.fn(t, tg)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// user returns a user ID unique to the running test.
func user(t *testing.T, suffix string) string {
	return fmt.Sprintf("user/%s/%d/%s", t.Name(), time.Now().UnixNano(), suffix)
}

func manager(t *testing.T, s session.Store, idle, absolute time.Duration) *session.Manager {
	t.Helper()
	m, err := session.New(s, &session.Options{IdleTimeout: idle, AbsoluteTimeout: absolute})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// long is a timeout no test outlives.
const long = time.Hour

func create(t *testing.T, m *session.Manager, u string, values map[string]string) (session.Token, *session.Session) {
	t.Helper()
	tok, s, err := m.Create(ctxT(t), u, values)
	if err != nil {
		t.Fatalf("Create(%q): %v", u, err)
	}
	if s.Version() != 1 || s.UserID() != u || !maps.Equal(s.Values(), nonNil(values)) {
		t.Fatalf("Create returned version %d, user %q, values %v", s.Version(), s.UserID(), s.Values())
	}
	if s.ID() != session.TokenID(tok) {
		t.Fatalf("session ID %s is not the token's ID %s", s.ID(), session.TokenID(tok))
	}
	return tok, s
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func load(t *testing.T, m *session.Manager, tok session.Token) *session.Session {
	t.Helper()
	s, err := m.Load(ctxT(t), tok)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func wantGone(t *testing.T, tg Target, m *session.Manager, tok session.Token, u string) {
	t.Helper()
	_, err := m.Load(ctxT(t), tok)
	wantErr(t, "Load of an ended session", err, session.ErrNotFound)
	for _, r := range list(t, tg.Direct, u) {
		if r.ID == session.TokenID(tok) {
			t.Fatalf("List still shows the ended session %s", session.TokenID(tok).Short())
		}
	}
}

func list(t *testing.T, s session.Store, u string) []session.Record {
	t.Helper()
	recs, err := s.List(ctxT(t), u)
	if err != nil {
		t.Fatalf("List(%q): %v", u, err)
	}
	return recs
}

func ids(recs []session.Record) []session.ID {
	out := make([]session.ID, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	slices.Sort(out)
	return out
}

func present(t *testing.T, tg Target, id session.ID) (bool, bool) {
	t.Helper()
	if tg.Present == nil {
		return false, false
	}
	return tg.Present(t, id), true
}

func testCreateLoadSave(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, 2*long)
	u := user(t, "u")
	tok, s := create(t, m, u, map[string]string{"cart": "3 apples", "ü": "ÿ"})
	if !s.IdleUntil().After(s.Created()) || s.IdleUntil().After(s.AbsoluteUntil()) {
		t.Fatalf("deadlines: created %v, idle %v, absolute %v", s.Created(), s.IdleUntil(), s.AbsoluteUntil())
	}
	if d := s.AbsoluteUntil().Sub(s.Created()); d < 2*long-time.Millisecond || d > 2*long+time.Millisecond {
		t.Fatalf("absolute deadline %v after creation, want %v", d, 2*long)
	}
	got := load(t, m, tok)
	if got.Version() != 1 || got.UserID() != u || got.Values()["cart"] != "3 apples" || got.Values()["ü"] != "ÿ" {
		t.Fatalf("Load: version %d, user %q, values %v", got.Version(), got.UserID(), got.Values())
	}
	if !got.Created().Equal(s.Created()) || !got.AbsoluteUntil().Equal(s.AbsoluteUntil()) {
		t.Fatalf("Load changed created/absolute: %v/%v, was %v/%v", got.Created(), got.AbsoluteUntil(), s.Created(), s.AbsoluteUntil())
	}
	if got.IdleUntil().Before(s.IdleUntil()) {
		t.Fatalf("Load moved the idle deadline back: %v < %v", got.IdleUntil(), s.IdleUntil())
	}
	got.Set("cart", "4 apples")
	got.Delete("ü")
	if err := m.Save(ctx, got); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if got.Version() != 2 || got.Modified() {
		t.Fatalf("after Save: version %d, modified %v", got.Version(), got.Modified())
	}
	again := load(t, m, tok)
	if again.Version() != 2 || !maps.Equal(again.Values(), map[string]string{"cart": "4 apples"}) {
		t.Fatalf("after Save, Load: version %d, values %v", again.Version(), again.Values())
	}
	recs := list(t, tg.Direct, u)
	if len(recs) != 1 || recs[0].ID != session.TokenID(tok) || recs[0].Version != 2 || recs[0].UserID != u {
		t.Fatalf("List = %+v", recs)
	}
	if p, ok := present(t, tg, session.TokenID(tok)); ok && !p {
		t.Fatal("Present reports no record for a live session")
	}
	if tg.Dump != nil {
		d := tg.Dump(t)
		if !strings.Contains(d, string(session.TokenID(tok)[4:])) {
			t.Fatal("the dump does not show the session's ID: the Dump hook sees nothing")
		}
		if strings.Contains(d, tok.Reveal()) {
			t.Fatal("the store keeps the raw token")
		}
	}
}

func testInvalidInput(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	s := tg.Store
	u := user(t, "u")
	id := session.TokenID(session.Token{})
	tok, live := create(t, m, u, nil)
	goodID := session.TokenID(tok)
	long := strings.Repeat("x", session.MaxDataLen)
	cases := []struct {
		name string
		call func() error
	}{
		{"create empty user", func() error { _, _, err := m.Create(ctx, "", nil); return err }},
		{"create long user", func() error {
			_, _, err := m.Create(ctx, strings.Repeat("u", session.MaxUserIDLen+1), nil)
			return err
		}},
		{"create user with NUL", func() error { _, _, err := m.Create(ctx, "a\x00b", nil); return err }},
		{"create user bad utf8", func() error { _, _, err := m.Create(ctx, "\xff", nil); return err }},
		{"create empty key", func() error { _, _, err := m.Create(ctx, u, map[string]string{"": "v"}); return err }},
		{"create bad utf8 value", func() error { _, _, err := m.Create(ctx, u, map[string]string{"k": "\xff"}); return err }},
		{"create data too long", func() error { _, _, err := m.Create(ctx, u, map[string]string{"k": long}); return err }},
		{"load zero token", func() error { _, err := m.Load(ctx, session.Token{}); return err }},
		{"store create bad id", func() error {
			_, err := s.Create(ctx, session.Record{ID: "zz", UserID: u}, time.Second, time.Second)
			return err
		}},
		{"store create zero idle", func() error {
			_, err := s.Create(ctx, session.Record{ID: goodID[:4] + goodID[4:68-1] + "0", UserID: u}, 0, time.Second)
			return err
		}},
		{"store create upper-case id", func() error {
			_, err := s.Create(ctx, session.Record{ID: session.ID(strings.ToUpper(string(goodID))), UserID: u}, time.Second, time.Second)
			return err
		}},
		{"store load bad id", func() error { _, err := s.Load(ctx, id, time.Second); return err }},
		{"store save version 0", func() error { _, err := s.Save(ctx, goodID, 0, nil, time.Second); return err }},
		{"store save data too long", func() error {
			_, err := s.Save(ctx, goodID, 1, make([]byte, session.MaxDataLen+1), time.Second)
			return err
		}},
		{"store touch zero idle", func() error { _, err := s.Touch(ctx, goodID, 1, 0); return err }},
		{"store rotate bad new id", func() error { _, err := s.Rotate(ctx, goodID, "x", 1, nil, time.Second); return err }},
		{"store delete bad id", func() error { return s.Delete(ctx, "x") }},
		{"store delete user empty", func() error { _, err := s.DeleteUser(ctx, ""); return err }},
		{"store list user empty", func() error { _, err := s.List(ctx, ""); return err }},
		{"revoke bad id", func() error { return m.Revoke(ctx, "nope") }},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%s: err = %v, want session.ErrInvalid", c.name, err)
		}
	}
	recs := list(t, tg.Direct, u)
	if len(recs) != 1 || recs[0].ID != goodID || recs[0].Version != 1 || !bytes.Equal(recs[0].Data, []byte("{}")) {
		t.Fatalf("invalid calls changed the store: %+v", recs)
	}
	if err := m.Save(ctx, live); err != nil {
		t.Fatalf("a valid save afterwards: %v", err)
	}
	for _, o := range []session.Options{
		{IdleTimeout: -time.Second}, {AbsoluteTimeout: session.MaxTimeout + 1},
		{Cookie: session.CookieOptions{Path: "/app"}}, {Cookie: session.CookieOptions{Name: session.DefaultCookieName, Insecure: true}},
		{Cookie: session.CookieOptions{Name: "bad name"}},
	} {
		if _, err := session.New(s, &o); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("New(%+v): err = %v, want session.ErrInvalid", o, err)
		}
	}
}

func testConcurrentSaves(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, _ := create(t, m, u, nil)
	const n = 8
	loaded := make([]*session.Session, n)
	for i := range loaded {
		loaded[i] = load(t, m, tok)
		loaded[i].Set("writer", fmt.Sprint(i))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range loaded {
		wg.Go(func() {
			<-start
			errs[i] = m.Save(ctx, loaded[i])
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("saves %d and %d both won from the same version", winner, i)
			}
			winner = i
		case errors.Is(err, session.ErrConflict):
		default:
			t.Fatalf("save %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no save won")
	}
	got := load(t, m, tok)
	if got.Version() != 2 || got.Values()["writer"] != fmt.Sprint(winner) {
		t.Fatalf("stored version %d, writer %q; want 2 and the winner %d", got.Version(), got.Values()["writer"], winner)
	}
	// A loser reloads and redoes its change.
	loser := load(t, m, tok)
	loser.Set("writer", "retry")
	if err := m.Save(ctx, loser); err != nil || loser.Version() != 3 {
		t.Fatalf("retry after conflict: %v, version %d", err, loser.Version())
	}
}

func testTouchCAS(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, _ := create(t, m, u, nil)
	a := load(t, m, tok)
	b := load(t, m, tok)
	if err := m.Touch(ctx, a); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	b.Set("k", "v")
	if err := m.Save(ctx, b); err != nil {
		t.Fatalf("Save: %v", err)
	}
	wantErr(t, "Touch of a stale snapshot", m.Touch(ctx, a), session.ErrConflict)
	a.Set("k", "stale")
	wantErr(t, "Save of a stale snapshot", m.Save(ctx, a), session.ErrConflict)
	if got := load(t, m, tok); got.Version() != 2 || got.Values()["k"] != "v" {
		t.Fatalf("stored version %d, k=%q; want 2, v", got.Version(), got.Values()["k"])
	}
}

type created struct {
	tok              session.Token
	invoked, settled time.Time
}

func testList(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	a, b := user(t, "a"), user(t, "b")
	var as, bs []session.ID
	for range 3 {
		tok, _ := create(t, m, a, nil)
		as = append(as, session.TokenID(tok))
	}
	for range 2 {
		tok, _ := create(t, m, b, nil)
		bs = append(bs, session.TokenID(tok))
	}
	slices.Sort(as)
	slices.Sort(bs)
	if got := ids(list(t, tg.Direct, a)); !slices.Equal(got, as) {
		t.Fatalf("List(a) = %v, want %v", got, as)
	}
	if got := ids(list(t, tg.Direct, b)); !slices.Equal(got, bs) {
		t.Fatalf("List(b) = %v, want %v", got, bs)
	}
	for _, id := range as {
		if id.Shard() != sessiondriver.UserShard(a) {
			t.Fatalf("ID %s is not in its user's shard %s", id, sessiondriver.UserShard(a))
		}
	}
	ss, err := m.List(ctx, a)
	if err != nil || len(ss) != 3 || ss[0].UserID() != a {
		t.Fatalf("Manager.List: %d sessions, %v", len(ss), err)
	}
	for i := 1; i < len(ss); i++ {
		if ss[i].Created().Before(ss[i-1].Created()) {
			t.Fatal("List is not oldest first")
		}
	}
	if err := m.Revoke(ctx, as[1]); err != nil {
		t.Fatal(err)
	}
	if got := ids(list(t, tg.Direct, a)); !slices.Equal(got, []session.ID{as[0], as[2]}) {
		t.Fatalf("List(a) after revoking one = %v", got)
	}
	n, err := m.RevokeUser(ctx, b)
	if err != nil || n != 2 {
		t.Fatalf("RevokeUser(b) = %d, %v; want 2", n, err)
	}
	if got := list(t, tg.Direct, b); len(got) != 0 {
		t.Fatalf("List(b) after RevokeUser = %v", got)
	}
	if got := ids(list(t, tg.Direct, a)); len(got) != 2 {
		t.Fatalf("RevokeUser(b) touched a: %v", got)
	}
	if n, err := m.RevokeUser(ctx, user(t, "nobody")); err != nil || n != 0 {
		t.Fatalf("RevokeUser of a user without sessions = %d, %v", n, err)
	}
}

// testUsers checks UserLister, for a store that has it: the users with
// live sessions under a prefix, in order, counted, paged, bounded.
func testUsers(t *testing.T, tg Target) {
	ul, ok := tg.Store.(sessiondriver.UserLister)
	if !ok {
		// A store wrapped for its faults: the view that lists is Direct.
		ul, ok = tg.Direct.(sessiondriver.UserLister)
	}
	if !ok {
		t.Skip("the store does not list users (sessiondriver.UserLister is optional)")
	}
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	base := user(t, "")
	a, b, c, d := base+"a", base+"b", base+"c", base+"d/1"
	for _, u := range []string{a, a, b, c, d} {
		create(t, m, u, nil)
	}
	// Not under base: a sibling that shares all but the last byte.
	create(t, m, strings.TrimSuffix(base, "/")+"+other", nil)
	if _, err := m.RevokeUser(ctx, c); err != nil {
		t.Fatal(err)
	}
	names := func(us []sessiondriver.UserInfo) []string {
		var out []string
		for _, u := range us {
			out = append(out, u.UserID)
		}
		return out
	}
	got, err := ul.Users(ctx, base, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(got), []string{a, b, d}) {
		t.Fatalf("Users(%q) = %q, want a, b and d/1 (c has no live session)", base, names(got))
	}
	if got[0].Sessions != 2 || got[1].Sessions != 1 || got[0].Newest.IsZero() {
		t.Fatalf("Users counts %+v, want 2 sessions of a and 1 of b with a newest time", got)
	}
	if got, err := ul.Users(ctx, base, a, 10); err != nil || !slices.Equal(names(got), []string{b, d}) {
		t.Fatalf("Users after a = %q, %v; want b and d/1", names(got), err)
	}
	if got, err := ul.Users(ctx, base, "", 1); err != nil || !slices.Equal(names(got), []string{a}) {
		t.Fatalf("Users limit 1 = %q, %v; want a", names(got), err)
	}
	if got, err := ul.Users(ctx, base+"zz", "", 10); err != nil || len(got) != 0 {
		t.Fatalf("Users of an empty prefix = %q, %v", names(got), err)
	}
	for _, limit := range []int{0, sessiondriver.MaxUserList + 1} {
		if _, err := ul.Users(ctx, base, "", limit); !errors.Is(err, session.ErrInvalid) {
			t.Fatalf("Users limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

func testStoredIDAsToken(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, s := create(t, m, u, nil)
	id := s.ID()
	if _, err := session.ParseToken(string(id)); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("the stored ID parses as a token: %v", err)
	}
	// A token-shaped string made of the stored digest and shard.
	digest, err := hex.DecodeString(string(id[4:]))
	if err != nil {
		t.Fatal(err)
	}
	shard, _ := hex.DecodeString(string(id[:4]))
	fake, err := session.ParseToken(base64.RawURLEncoding.EncodeToString(append(digest, shard...)))
	if err != nil {
		t.Fatalf("ParseToken of the token-shaped ID: %v", err)
	}
	_, err = m.Load(ctx, fake)
	wantErr(t, "Load with the stored ID as token", err, session.ErrNotFound)
	// The ID handed to the store's Load directly as if it were a digest of
	// itself: not found either.
	_, err = tg.Store.Load(ctx, session.TokenID(fake), time.Minute)
	wantErr(t, "store Load of the ID's digest", err, session.ErrNotFound)
	load(t, m, tok)
	if tg.Dump != nil && strings.Contains(tg.Dump(t), tok.Reveal()) {
		t.Fatal("the store keeps the raw token")
	}
}

func testTokensAbsentFromLogs(t *testing.T, tg Target) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := session.New(tg.Store, &session.Options{IdleTimeout: long, AbsoluteTimeout: long, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	u := user(t, "u")
	var secrets []string
	tok, s, err := m.Create(ctx, u, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, tok.Reveal())
	stale := load(t, m, tok)
	s.Set("k", "w")
	if err := m.Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	stale.Set("k", "x")
	if err := m.Save(ctx, stale); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("stale save: %v", err)
	}
	tok2, err := m.Rotate(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, tok2.Reveal())
	_, err = m.Load(ctx, tok)
	wantErr(t, "Load of the rotated token", err, session.ErrNotFound)
	tg.Faults.Cut()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = m.Load(short, tok2)
	cancel()
	tg.Faults.Heal()
	awaitHealed(t, tg.Store, u)
	if err == nil {
		t.Fatal("Load through a cut store succeeded")
	}
	_, errParse := session.ParseToken(tok2.Reveal() + "!")
	// Everything an application might print.
	logger.Info("request", "token", tok2, "tokens", []session.Token{tok, tok2}, "err", err, "parse", errParse)
	logger.Info("struct", "v", struct{ T session.Token }{tok2})
	js, _ := json.Marshal(map[string]any{"t": tok2, "s": struct{ T session.Token }{tok}})
	text := fmt.Sprintf("%v %s %q %x %X %+v %#v %d %10.3s %v %+v %#v", tok2, tok2, tok2, tok2, tok2, tok2, tok2, tok2, tok2,
		&tok2, struct{ T session.Token }{tok2}, []session.Token{tok2}) + string(js) + err.Error() + errParse.Error() + fmt.Sprint(tok2)
	if _, err := m.RevokeUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	all := buf.String() + text
	if !strings.Contains(buf.String(), "session created") || !strings.Contains(all, "REDACTED") {
		t.Fatalf("the capture holds no session events: %s", buf.String())
	}
	for _, sec := range secrets {
		if strings.Contains(all, sec) || strings.Contains(all, sec[:20]) {
			t.Fatalf("a token appears in logs or printed values:\n%s", all)
		}
	}
}

func testUnreachable(t *testing.T, tg Target) {
	ctx := ctxT(t)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, s := create(t, m, u, map[string]string{"k": "v"})
	tg.Faults.Cut()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Create", func(ctx context.Context) error { _, _, err := m.Create(ctx, u, nil); return err }},
		{"Load", func(ctx context.Context) error { _, err := m.Load(ctx, tok); return err }},
		{"Touch", func(ctx context.Context) error { return m.Touch(ctx, s) }},
		{"Save", func(ctx context.Context) error { return m.Save(ctx, s) }},
		{"Rotate", func(ctx context.Context) error { _, err := m.Rotate(ctx, s); return err }},
		{"Revoke", func(ctx context.Context) error { return m.Revoke(ctx, s.ID()) }},
		{"RevokeUser", func(ctx context.Context) error { _, err := m.RevokeUser(ctx, u); return err }},
		{"List", func(ctx context.Context) error { _, err := m.List(ctx, u); return err }},
	}
	for _, c := range calls {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.call(short)
		cancel()
		if !errors.Is(err, session.ErrUnavailable) || errors.Is(err, session.ErrNotFound) {
			t.Errorf("%s while cut off: err = %v, want session.ErrUnavailable (and not ErrNotFound)", c.name, err)
		}
		if err != nil && strings.Contains(err.Error(), tok.Reveal()) {
			t.Errorf("%s: the error contains the token", c.name)
		}
	}
	tg.Faults.Heal()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := m.Load(ctx, tok)
		if err == nil {
			if got.Values()["k"] != "v" {
				t.Fatalf("after healing: values %v", got.Values())
			}
			break
		}
		if !errors.Is(err, session.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Load after healing: %v (the session must still be there, unchanged)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitHealed waits until s answers again after Faults.Heal (a client may
// need a moment to reconnect).
func awaitHealed(t *testing.T, s session.Store, u string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.List(ctxT(t), u)
		if err == nil {
			return
		}
		if !errors.Is(err, session.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("the store does not answer after healing: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
