package main

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// TestServeSessionValues runs tenure serve on SQLite (the embedded default)
// and PostgreSQL and goes through the Go client: a value written while its
// session is live lands, one at another version, with a bad token or after
// the session was revoked (alone or with all of its user's) is refused with
// the session's error and leaves what the database holds as it was; the
// session token appears in no error and no log line.
func TestServeSessionValues(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		addr, _, stderr, stop := startServeStore(t, dir, "")
		db, err := sqlitestore.Open(t.Context(), storeopen.EmbeddedFile(dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		raw := func(t *testing.T, userID, name string) ([]byte, bool) {
			t.Helper()
			var v []byte
			err := db.DB().QueryRowContext(t.Context(), `SELECT value FROM "`+servestore.SessionValueTable+`" WHERE user_id = ? AND name = ?`, userID, name).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return v, true
		}
		toks := sessionValueRoundTrip(t, "http://"+addr, serveToken(t, dir), raw)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		checkNoToken(t, stderr.String(), toks)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.SharedPostgres(t).NewDatabase(t)
		pool := pgxPool(t, dsn)
		if err := newPG(t, pool, nil).Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		addr, _, stderr, stop := startServeStore(t, dir, dsn)
		raw := func(t *testing.T, userID, name string) ([]byte, bool) {
			t.Helper()
			var v []byte
			err := pool.QueryRow(t.Context(), `SELECT value FROM "tenure"."`+servestore.SessionValueTable+`" WHERE user_id = $1 AND name = $2`, userID, name).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return v, true
		}
		toks := sessionValueRoundTrip(t, "http://"+addr, serveToken(t, dir), raw)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		checkNoToken(t, stderr.String(), toks)
	})
}

// serveToken is the API token serve made in dir.
func serveToken(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkNoToken fails t if s shows one of toks.
func checkNoToken(t *testing.T, s string, toks []string) {
	t.Helper()
	for _, tok := range toks {
		if strings.Contains(s, tok) {
			t.Fatalf("a session token appears in:\n%s", s)
		}
	}
}

// sessionValueRoundTrip writes and reads values of alice through the
// client of base, checking what raw reads from the database; it returns
// the session tokens it used.
func sessionValueRoundTrip(t *testing.T, base, apiToken string, raw func(t *testing.T, userID, name string) ([]byte, bool)) []string {
	t.Helper()
	var sessionTokens []string
	ctx := t.Context()
	c, err := client.New(base, &client.Options{Token: apiToken})
	if err != nil {
		t.Fatal(err)
	}
	want := func(name string, v []byte) {
		t.Helper()
		got, ok := raw(t, "alice", name)
		switch {
		case v == nil && ok:
			t.Fatalf("alice/%s holds %q, want nothing", name, got)
		case v != nil && (!ok || !bytes.Equal(got, v)):
			t.Fatalf("alice/%s holds %q (present %v), want %q", name, got, ok, v)
		}
		r, rok, err := c.SessionRead(ctx, "alice", name)
		if err != nil || rok != (v != nil) || !bytes.Equal(r, v) {
			t.Fatalf("SessionRead alice/%s: %q %v %v, want %q", name, r, rok, err, v)
		}
	}
	var errs []error
	refused := func(err, target error) {
		t.Helper()
		errs = append(errs, err)
		if !errors.Is(err, target) {
			t.Fatalf("got %v, want an error wrapping %v", err, target)
		}
	}

	m, err := session.New(c.Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, s, err := m.Create(ctx, "alice", map[string]string{"cart": "1"})
	if err != nil {
		t.Fatal(err)
	}
	sessionTokens = append(sessionTokens, tok.Reveal())

	want("balance", nil)
	if err := c.SessionWrite(ctx, tok, 0, "balance", []byte("100.00")); err != nil {
		t.Fatalf("write while live: %v", err)
	}
	want("balance", []byte("100.00"))
	bin := []byte{0x00, 0xff, 0x10}
	if err := c.SessionWrite(ctx, tok, s.Version(), "balance", bin); err != nil {
		t.Fatalf("write at the session's version: %v", err)
	}
	want("balance", bin)

	refused(c.SessionWrite(ctx, tok, s.Version()+1, "balance", []byte("0")), session.ErrConflict)
	want("balance", bin)
	refused(c.SessionWrite(ctx, tenure.TokenOf("not-a-session-token"), 0, "balance", []byte("0")), session.ErrInvalid)
	refused(c.SessionWrite(ctx, tok, 0, "", []byte("0")), session.ErrInvalid)
	refused(c.SessionWrite(ctx, tok, 0, "bal\x00ance", []byte("0")), session.ErrInvalid)
	refused(c.SessionWrite(ctx, tok, 0, "balance", make([]byte, serveapi.MaxSessionValueLen+1)), session.ErrInvalid)
	want("balance", bin)

	// Logged out: refused as not found, the value stays.
	if err := m.Revoke(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	err = c.SessionWrite(ctx, tok, 0, "balance", []byte("1000000.00"))
	refused(err, session.ErrNotFound)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Type != serveapi.TypeNotFound || ce.Status != 404 {
		t.Fatalf("after revoke: %#v", err)
	}
	refused(c.SessionWrite(ctx, tok, s.Version(), "role", []byte("admin")), session.ErrNotFound)
	want("balance", bin)
	want("role", nil)

	// "Log out everywhere" ends another session's writes too.
	tok2, _, err := m.Create(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	sessionTokens = append(sessionTokens, tok2.Reveal())
	if err := c.SessionWrite(ctx, tok2, 0, "role", []byte("member")); err != nil {
		t.Fatalf("write with the second session: %v", err)
	}
	if n, err := m.RevokeUser(ctx, "alice"); err != nil || n != 1 {
		t.Fatalf("revoke user: %d %v", n, err)
	}
	refused(c.SessionWrite(ctx, tok2, 0, "role", []byte("admin")), session.ErrNotFound)
	want("role", []byte("member"))

	for _, err := range errs {
		checkNoToken(t, err.Error(), sessionTokens)
	}
	return sessionTokens
}
