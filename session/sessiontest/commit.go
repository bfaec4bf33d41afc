package sessiontest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/txn"
)

// revokeWait bounds how long a held commit waits for a racing revoke to
// return. A store that keeps the check in force until the commit never
// lets the revoke return meanwhile, so the wait always runs out there (and
// only makes the case slower on a busy machine); a store that does not
// lets it return within milliseconds, and the case fails.
const revokeWait = time.Second

func committer(t *testing.T, tg Target) Committer {
	t.Helper()
	if tg.Commit == nil {
		t.Fatal("sessiontest: Target.Commit is nil: a store that keeps sessions checks them at the commit")
	}
	return tg.Commit
}

func wantValue(t *testing.T, c Committer, u, name, want string, wantOK bool) {
	t.Helper()
	got, ok, err := c.Read(ctxT(t), u, name)
	if err != nil {
		t.Fatalf("Read %q: %v", name, err)
	}
	if ok != wantOK || got != want {
		t.Fatalf("committed value %q = %q (present %v), want %q (present %v)", name, got, ok, want, wantOK)
	}
}

// testCommitChecks: the commit runs while the session is live (at the
// version given, or any with 0) and is refused, writing nothing, once it
// is revoked, rotated away, expired or at another version.
func testCommitChecks(t *testing.T, tg Target) {
	ctx := ctxT(t)
	c := committer(t, tg)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, s := create(t, m, u, nil)
	id := session.TokenID(tok)
	if err := c.Commit(ctx, id, 0, u, "balance", "100", nil); err != nil {
		t.Fatalf("Commit of a live session, any version: %v", err)
	}
	wantValue(t, c, u, "balance", "100", true)
	if err := c.Commit(ctx, id, s.Version(), u, "balance", "90", nil); err != nil {
		t.Fatalf("Commit at the loaded version %d: %v", s.Version(), err)
	}
	wantValue(t, c, u, "balance", "90", true)

	// Another request saved the session: the version read before is stale.
	read := s.Version()
	s.Set("step", "2")
	if err := m.Save(ctx, s); err != nil {
		t.Fatalf("Save: %v", err)
	}
	wantErr(t, "Commit at a version saved over", c.Commit(ctx, id, read, u, "balance", "80", nil), session.ErrConflict)
	wantValue(t, c, u, "balance", "90", true)
	if err := c.Commit(ctx, id, 0, u, "balance", "80", nil); err != nil {
		t.Fatalf("Commit, any version, after a save: %v", err)
	}
	wantValue(t, c, u, "balance", "80", true)

	// Bad input is refused and writes nothing.
	err := c.Commit(ctx, session.ID("not-an-id"), 0, u, "balance", "0", nil)
	wantErr(t, "Commit with a malformed session ID", err, session.ErrInvalid)
	wantValue(t, c, u, "balance", "80", true)

	// Rotation ends the old ID; the new one commits.
	newTok, err := m.Rotate(ctx, s)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	wantErr(t, "Commit under the rotated-away ID", c.Commit(ctx, id, 0, u, "balance", "70", nil), session.ErrNotFound)
	wantValue(t, c, u, "balance", "80", true)
	if err := c.Commit(ctx, session.TokenID(newTok), s.Version(), u, "balance", "70", nil); err != nil {
		t.Fatalf("Commit under the rotated ID: %v", err)
	}
	wantValue(t, c, u, "balance", "70", true)

	// A revoked session commits nothing.
	if err := m.Revoke(ctx, session.TokenID(newTok)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	err = c.Commit(ctx, session.TokenID(newTok), 0, u, "balance", "0", nil)
	wantErr(t, "Commit after the revoke", err, session.ErrNotFound)
	if err != nil && strings.Contains(err.Error(), newTok.Reveal()) {
		t.Fatal("the error contains the token")
	}
	wantValue(t, c, u, "balance", "70", true)

	// Nor does an expired one, whatever the store's cleanup has done.
	em := manager(t, tg.Store, tg.Unit, long)
	etok, _ := create(t, em, u, nil)
	tg.Advance(2 * tg.Unit)
	if tg.LagCleanup != nil {
		tg.LagCleanup(t, session.TokenID(etok))
	}
	wantErr(t, "Commit of an idle-expired session", c.Commit(ctx, session.TokenID(etok), 0, u, "other", "x", nil), session.ErrNotFound)
	wantValue(t, c, u, "other", "", false)
}

// raceRevoke runs a commit that holds between its check and its commit
// while revoke runs, and fails the test if the commit succeeded although
// the revoke had returned before the commit was made: a business change
// committed after the logout did.
func raceRevoke(t *testing.T, tg Target, revoke func(ctx context.Context, id session.ID, u string) error) {
	ctx := ctxT(t)
	c := committer(t, tg)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, s := create(t, m, u, nil)
	id := session.TokenID(tok)

	var revoked atomic.Bool
	checked := make(chan struct{})
	revokeDone := make(chan error, 1)
	var revokedFirst bool
	hold := func() {
		close(checked)
		select {
		case <-time.After(revokeWait):
		case err := <-revokeDone:
			revokeDone <- err
		}
		revokedFirst = revoked.Load()
	}
	go func() {
		<-checked
		err := revoke(ctx, id, u)
		revoked.Store(true)
		revokeDone <- err
	}()
	cerr := c.Commit(ctx, id, s.Version(), u, "transfer", "done", hold)
	var rerr error
	select {
	case rerr = <-revokeDone:
	case <-ctx.Done():
		t.Fatal("the revoke never returned after the commit ended")
	}
	if rerr != nil {
		t.Fatalf("revoke: %v", rerr)
	}
	switch {
	case cerr == nil && revokedFirst:
		t.Fatal("the commit succeeded after the revoke had returned: a sensitive change committed after the logout")
	case cerr == nil:
		wantValue(t, c, u, "transfer", "done", true)
	case errors.Is(cerr, session.ErrNotFound):
		// The revoke committed first (it may not have returned yet).
		wantValue(t, c, u, "transfer", "", false)
	default:
		t.Fatalf("Commit racing the revoke: %v", cerr)
	}
	wantGone(t, tg, m, tok, u)
	wantErr(t, "Commit after the revoke", c.Commit(ctx, id, 0, u, "transfer", "again", nil), session.ErrNotFound)
}

// testCommitRacingRevoke: a logout that races a sensitive commit either
// waits for it (the commit comes first) or comes first and the commit is
// refused; the two never interleave.
func testCommitRacingRevoke(t *testing.T, tg Target) {
	m := manager(t, tg.Store, long, long)
	raceRevoke(t, tg, func(ctx context.Context, id session.ID, _ string) error { return m.Revoke(ctx, id) })
}

// testCommitRacingRevokeUser: the same for "log out everywhere".
func testCommitRacingRevokeUser(t *testing.T, tg Target) {
	m := manager(t, tg.Store, long, long)
	raceRevoke(t, tg, func(ctx context.Context, _ session.ID, u string) error {
		n, err := m.RevokeUser(ctx, u)
		if err == nil && n != 1 {
			t.Errorf("RevokeUser ended %d sessions, want 1", n)
		}
		return err
	})
}

// testCommitUnreachable: a commit while the store is cut off is
// ErrUnavailable, never a refusal for a missing session, and writes
// nothing.
func testCommitUnreachable(t *testing.T, tg Target) {
	ctx := ctxT(t)
	c := committer(t, tg)
	m := manager(t, tg.Store, long, long)
	u := user(t, "u")
	tok, _ := create(t, m, u, nil)
	tg.Faults.Cut()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := c.Commit(short, session.TokenID(tok), 0, u, "cut", "x", nil)
	cancel()
	if !errors.Is(err, session.ErrUnavailable) || errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Commit while cut off: err = %v, want session.ErrUnavailable (and not ErrNotFound)", err)
	}
	tg.Faults.Heal()
	wantValue(t, c, u, "cut", "", false)
}

// SQLCommitter is the Committer of a SQL store on database/sql: a
// transaction on DB in which the store's CheckSession (Bind(tx)) runs
// before the value's upsert, then hold, then the commit.
type SQLCommitter struct {
	// DB is the database the store under test uses (behind the target's
	// faults, where they act on the connection).
	DB *sql.DB
	// Direct is an independent connection for reads. Default DB.
	Direct *sql.DB
	// Bind binds the store under test to a transaction (its Tx method).
	Bind func(tx *sql.Tx) txn.Tx
	// Upsert sets (user, name) to value, its parameters in that order.
	Upsert string
	// Select reads the value of (user, name).
	Select string
	// Cut, when not nil, reports whether the target's faults cut the
	// store off (for in-process stores, whose faults are a client-side
	// hook): a commit then fails as the store would, ErrUnavailable.
	Cut func() bool
}

// Commit implements Committer.
func (c SQLCommitter) Commit(ctx context.Context, id session.ID, version uint64, userID, name, value string, hold func()) error {
	if c.Cut != nil && c.Cut() {
		return fmt.Errorf("%w: sessiontest: cut off", session.ErrUnavailable)
	}
	tx, err := c.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: begin: %w", session.ErrUnavailable, err)
	}
	defer tx.Rollback()
	if err := c.Bind(tx).CheckSession(ctx, id, version); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, c.Upsert, userID, name, value); err != nil {
		return fmt.Errorf("%w: upsert: %w", session.ErrUnavailable, err)
	}
	if hold != nil {
		hold()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: commit: %w", session.ErrUnavailable, err)
	}
	return nil
}

// Read implements Committer.
func (c SQLCommitter) Read(ctx context.Context, userID, name string) (string, bool, error) {
	db := c.Direct
	if db == nil {
		db = c.DB
	}
	var v string
	err := db.QueryRowContext(ctx, c.Select, userID, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}
