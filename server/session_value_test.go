package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/fencedkv"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
)

// newSession creates a session of user through the API, with a token the
// server makes.
func newSession(t *testing.T, e *env, user string) serveapi.SessionRecord {
	t.Helper()
	st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions", serveapi.SessionCreate{UserID: user, Values: map[string]string{"a": "1"},
		Idle: serveapi.Duration(time.Hour), Absolute: serveapi.Duration(2 * time.Hour)})
	var rec serveapi.SessionRecord
	if err := json.Unmarshal(b, &rec); st != 201 || err != nil || rec.Token == "" || rec.Version != 1 {
		t.Fatalf("create session: %d %s", st, b)
	}
	return rec
}

// readValue reads user's value name through readSessionValue.
func readValue(t *testing.T, e *env, tok, user, name string) serveapi.SessionValue {
	t.Helper()
	st, b, _ := e.do(t, tok, "GET", "/v1/sessions/value?"+url.Values{"user_id": {user}, "name": {name}}.Encode(), nil)
	var v serveapi.SessionValue
	if err := json.Unmarshal(b, &v); st != 200 || err != nil {
		t.Fatalf("read session value: %d %s", st, b)
	}
	return v
}

// stored returns what the store view keeps for user's value name.
func stored(t *testing.T, e *env, user, name string) ([]byte, bool) {
	t.Helper()
	v, ok, err := e.sv.SessionRead(t.Context(), user, name)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

func wantStored(t *testing.T, e *env, user, name string, want []byte) {
	t.Helper()
	v, ok := stored(t, e, user, name)
	if want == nil {
		if ok {
			t.Fatalf("%s/%s holds %q, want nothing written", user, name, v)
		}
		return
	}
	if !ok || !bytes.Equal(v, want) {
		t.Fatalf("%s/%s holds %q (present %v), want %q", user, name, v, ok, want)
	}
}

// TestSessionValueWrite: a value is written while its session is live (at
// the version given), and after the session was revoked, or at another
// version, the write is refused with the session's problem and the value
// stays as it was; the token shows up in no answer and no log line.
func TestSessionValueWrite(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	rec := newSession(t, e, "alice")
	var bodies []string
	write := func(in serveapi.SessionValueWrite) (int, []byte) {
		t.Helper()
		st, b, h := e.do(t, adminTok, "POST", "/v1/sessions/write", in)
		bodies = append(bodies, string(b))
		if st != 204 {
			if ct := h.Get("Content-Type"); ct != serveapi.ProblemContentType {
				t.Fatalf("answer %d with content type %q", st, ct)
			}
		}
		return st, b
	}

	// Live, any version: written.
	if st, b := write(serveapi.SessionValueWrite{Token: rec.Token, Name: "role", Value: "owner"}); st != 204 {
		t.Fatalf("write while live: %d %s", st, b)
	}
	if v := readValue(t, e, adminTok, "alice", "role"); v.UserID != "alice" || v.Name != "role" || !v.Present || v.Value != "owner" || string(v.ValueBase64) != "owner" {
		t.Fatalf("read %+v", v)
	}
	wantStored(t, e, "alice", "role", []byte("owner"))
	if v := readValue(t, e, adminTok, "alice", "balance"); v.Present || v.Value != "" || v.ValueBase64 == nil || len(v.ValueBase64) != 0 {
		t.Fatalf("a value never written reads %+v", v)
	}

	// Live at the version given, a binary value: written.
	bin := []byte{0xff, 0x00, 0x01}
	if st, b := write(serveapi.SessionValueWrite{Token: rec.Token, Version: 1, Name: "role", ValueBase64: bin}); st != 204 {
		t.Fatalf("write at version 1: %d %s", st, b)
	}
	if v := readValue(t, e, adminTok, "alice", "role"); !v.Present || v.Value != "" || !bytes.Equal(v.ValueBase64, bin) {
		t.Fatalf("binary read %+v", v)
	}
	wantStored(t, e, "alice", "role", bin)

	// The session moves on to version 2: a write at version 1 is a
	// conflict and changes nothing; one at version 2 lands.
	st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions/save", serveapi.SessionRef{ID: rec.ID, Version: 1, Data: []byte("{}"), Idle: serveapi.Duration(time.Hour)})
	if st != 200 {
		t.Fatalf("save: %d %s", st, b)
	}
	st, b = write(serveapi.SessionValueWrite{Token: rec.Token, Version: 1, Name: "role", Value: "admin"})
	if st != 409 || !strings.Contains(string(b), serveapi.TypeConflict) {
		t.Fatalf("write at a stale version: %d %s", st, b)
	}
	wantStored(t, e, "alice", "role", bin)
	if st, b := write(serveapi.SessionValueWrite{Token: rec.Token, Version: 2, Name: "role", Value: "admin"}); st != 204 {
		t.Fatalf("write at version 2: %d %s", st, b)
	}
	wantStored(t, e, "alice", "role", []byte("admin"))
	// By the session's store ID, as the other session operations take it.
	if st, b := write(serveapi.SessionValueWrite{ID: rec.ID, Version: 2, Name: "balance", Value: "10"}); st != 204 {
		t.Fatalf("write by id: %d %s", st, b)
	}
	wantStored(t, e, "alice", "balance", []byte("10"))

	// Revoked: not found, and the value stays.
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions/revoke", serveapi.SessionRef{Token: rec.Token}); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	for _, in := range []serveapi.SessionValueWrite{
		{Token: rec.Token, Name: "role", Value: "root"},
		{Token: rec.Token, Version: 2, Name: "role", Value: "root"},
		{Token: rec.Token, Name: "balance", Value: "1000000"},
		{ID: rec.ID, Name: "balance", Value: "1000000"},
	} {
		st, b := write(in)
		var p serveapi.Problem
		json.Unmarshal(b, &p)
		if st != 404 || p.Type != serveapi.TypeNotFound {
			t.Fatalf("write after revoke: %d %s", st, b)
		}
	}
	wantStored(t, e, "alice", "role", []byte("admin"))
	wantStored(t, e, "alice", "balance", []byte("10"))
	if v := readValue(t, e, adminTok, "alice", "role"); v.Value != "admin" {
		t.Fatalf("read after the refused writes: %+v", v)
	}
	// The view checks the session itself, at the write: the revoked
	// session's ID is refused there too.
	tok, err := session.ParseToken(rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sv.SessionWrite(ctx, session.TokenID(tok), 0, "alice", "role", []byte("root")); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("the view's write after revoke: %v", err)
	}
	wantStored(t, e, "alice", "role", []byte("admin"))

	// "Log out everywhere" ends the other sessions' writes too.
	other := newSession(t, e, "alice")
	if st, b := write(serveapi.SessionValueWrite{Token: other.Token, Name: "role", Value: "member"}); st != 204 {
		t.Fatalf("write with another session: %d %s", st, b)
	}
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions/revoke-user", serveapi.UserRef{UserID: "alice"}); st != 200 {
		t.Fatalf("revoke user: %d %s", st, b)
	}
	if st, b := write(serveapi.SessionValueWrite{Token: other.Token, Name: "role", Value: "root"}); st != 404 {
		t.Fatalf("write after revoke-user: %d %s", st, b)
	}
	wantStored(t, e, "alice", "role", []byte("member"))

	logs := e.logs.String()
	for _, s := range append(bodies, logs) {
		for _, tk := range []string{rec.Token, other.Token} {
			if strings.Contains(s, tk) {
				t.Fatalf("a session token appears in an answer or the logs:\n%s", s)
			}
		}
	}
	if !strings.Contains(logs, "writeSessionValue") {
		t.Errorf("the logs do not name the operation:\n%s", logs)
	}
}

// TestSessionValueBadInput: bad input is refused as invalid before the
// session is looked at, and writes nothing; the limits themselves are
// accepted.
func TestSessionValueBadInput(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBodyBytes = 4 << 20
	e := newEnv(t, cfg)
	rec := newSession(t, e, "alice")
	big := make([]byte, serveapi.MaxSessionValueLen+1)
	cases := []struct {
		name string
		body any
	}{
		{"no token", `{"name":"role","value":"x"}`},
		{"empty token", serveapi.SessionValueWrite{Name: "role", Value: "x"}},
		{"malformed token", serveapi.SessionValueWrite{Token: "not-a-session-token", Name: "role", Value: "x"}},
		{"an ID as the token", serveapi.SessionValueWrite{Token: rec.ID, Name: "role", Value: "x"}},
		{"id and token", serveapi.SessionValueWrite{ID: rec.ID, Token: rec.Token, Name: "role", Value: "x"}},
		{"malformed id", serveapi.SessionValueWrite{ID: "not-an-id", Name: "role", Value: "x"}},
		{"no name", `{"token":"` + rec.Token + `","value":"x"}`},
		{"empty name", serveapi.SessionValueWrite{Token: rec.Token, Value: "x"}},
		{"name too long", serveapi.SessionValueWrite{Token: rec.Token, Name: strings.Repeat("n", 256), Value: "x"}},
		{"name with a control character", serveapi.SessionValueWrite{Token: rec.Token, Name: "ro\u0007le", Value: "x"}},
		{"name with NUL", serveapi.SessionValueWrite{Token: rec.Token, Name: "role\u0000", Value: "x"}},
		{"name with DEL", serveapi.SessionValueWrite{Token: rec.Token, Name: "role\u007f", Value: "x"}},
		{"name with a C1 control", serveapi.SessionValueWrite{Token: rec.Token, Name: "role\u0085", Value: "x"}},
		{"value and value_base64", serveapi.SessionValueWrite{Token: rec.Token, Name: "role", Value: "x", ValueBase64: []byte("y")}},
		{"value too large", serveapi.SessionValueWrite{Token: rec.Token, Name: "role", ValueBase64: big}},
		{"text value too large", serveapi.SessionValueWrite{Token: rec.Token, Name: "role", Value: string(bytes.Repeat([]byte("v"), len(big)))}},
		{"unknown field", `{"token":"` + rec.Token + `","name":"role","value":"x","user_id":"bob"}`},
		{"version not a number", `{"token":"` + rec.Token + `","name":"role","version":"1"}`},
	}
	for _, c := range cases {
		st, b, h := e.do(t, adminTok, "POST", "/v1/sessions/write", c.body)
		p := problem(t, st, b, h, 400, serveapi.TypeInvalid)
		if p.Detail == "" {
			t.Errorf("%s: no reason given", c.name)
		}
		if strings.Contains(string(b), rec.Token) {
			t.Errorf("%s: the problem shows the token: %s", c.name, b)
		}
	}
	// (A bad name is refused by the view too: it cannot hold one.)
	wantStored(t, e, "alice", "role", nil)
	if strings.Contains(e.logs.String(), rec.Token) {
		t.Fatalf("the token appears in the logs:\n%s", e.logs)
	}
	// The limits: a name of 255 bytes (UTF-8 beyond ASCII allowed) and a
	// value of 1 MiB.
	long := strings.Repeat("é", 127) + "x"
	limit := bytes.Repeat([]byte{0xab}, serveapi.MaxSessionValueLen)
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: rec.Token, Name: long, ValueBase64: limit}); st != 204 {
		t.Fatalf("write at the limits: %d %s", st, b)
	}
	wantStored(t, e, "alice", long, limit)
	// An empty value is a value.
	if st, b, _ := e.do(t, adminTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: rec.Token, Name: "flag"}); st != 204 {
		t.Fatalf("empty write: %d %s", st, b)
	}
	wantStored(t, e, "alice", "flag", []byte{})
	if v := readValue(t, e, adminTok, "alice", "flag"); !v.Present || v.Value != "" || len(v.ValueBase64) != 0 {
		t.Fatalf("empty value reads %+v", v)
	}

	for _, q := range []string{"name=role", "user_id=alice", "user_id=&name=role", "user_id=alice&name=", "user_id=alice&name=ro%07le",
		"user_id=alice&name=" + strings.Repeat("n", 256), "user_id=a%00b&name=role"} {
		st, b, h := e.do(t, adminTok, "GET", "/v1/sessions/value?"+q, nil)
		problem(t, st, b, h, 400, serveapi.TypeInvalid)
	}
}

// TestSessionValueNamespaces: a token limited to some namespaces writes
// only values of users in them (the session's user, found from its token)
// and reads only theirs; the "read" alias reads but does not write.
func TestSessionValueNamespaces(t *testing.T) {
	e := newEnv(t, nil)
	alice := newSession(t, e, "alice")
	bob := newSession(t, e, "billing/bob")
	st, b, h := e.do(t, billTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: alice.Token, Name: "role", Value: "x"})
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
	wantStored(t, e, "alice", "role", nil)
	if st, b, _ := e.do(t, billTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: bob.Token, Name: "role", Value: "payer"}); st != 204 {
		t.Fatalf("write inside the namespace: %d %s", st, b)
	}
	wantStored(t, e, "billing/bob", "role", []byte("payer"))
	st, b, h = e.do(t, billTok, "GET", "/v1/sessions/value?user_id=alice&name=role", nil)
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
	if v := readValue(t, e, billTok, "billing/bob", "role"); v.Value != "payer" {
		t.Fatalf("read inside the namespace: %+v", v)
	}
	if v := readValue(t, e, readerTok, "billing/bob", "role"); v.Value != "payer" {
		t.Fatalf("read with the read alias: %+v", v)
	}
	st, b, h = e.do(t, readerTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: bob.Token, Name: "role", Value: "x"})
	problem(t, st, b, h, 403, serveapi.TypeForbidden)
	wantStored(t, e, "billing/bob", "role", []byte("payer"))
}

// TestSessionValueNotSupported: without the view (or without sessions to
// check against) both operations answer not_supported and write nothing.
func TestSessionValueNotSupported(t *testing.T) {
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := fencedkv.NewMemSessionKV(m)
	for _, st := range []server.Stores{
		{Leases: m.Leases(), Sessions: m.Sessions()},
		{Leases: m.Leases(), SessionValues: kv},
	} {
		srv, err := server.New(st, &server.Options{Config: testConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		e := &env{url: hs.URL}
		mgr, err := session.New(m.Sessions(), nil)
		if err != nil {
			t.Fatal(err)
		}
		stok, _, err := mgr.Create(t.Context(), "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		s, b, h := e.do(t, adminTok, "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: stok.Reveal(), Name: "role", Value: "x"})
		problem(t, s, b, h, 501, serveapi.TypeNotSupported)
		s, b, h = e.do(t, adminTok, "GET", "/v1/sessions/value?user_id=alice&name=role", nil)
		problem(t, s, b, h, 501, serveapi.TypeNotSupported)
		hs.Close()
		if _, ok, _ := kv.SessionRead(t.Context(), "alice", "role"); ok {
			t.Fatal("a store without the view wrote a value")
		}
	}
}
