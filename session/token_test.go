package session_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

func TestTokenRedacts(t *testing.T) {
	m, _ := session.New(newMem(t, nil).Sessions(), nil)
	tok, s, err := m.Create(t.Context(), "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	secret := tok.Reveal()
	if len(secret) != 46 {
		t.Fatalf("token is %d characters", len(secret))
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "tok", tok, "p", &tok)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "tok", tok, "group", slog.GroupValue(slog.Any("t", tok)))
	js, _ := json.Marshal(map[string]any{"tok": tok})
	printed := fmt.Sprintf("%v|%s|%q|%x|%#v|%+v|%d|%T", tok, tok, tok, tok, tok, tok, tok, tok) + buf.String() + string(js) + tok.String() + tok.GoString()
	if strings.Contains(printed, secret) || !strings.Contains(printed, "REDACTED") {
		t.Fatalf("printed: %s", printed)
	}
	if _, err := session.ParseToken(secret + "x"); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("ParseToken error %v", err)
	}
	back, err := session.ParseToken(secret)
	if err != nil || session.TokenID(back) != s.ID() || !back.Equal(tok) {
		t.Fatalf("ParseToken round trip: %v", err)
	}
	if s.ID().Shard() != sessiondriver.UserShard("alice") || len(s.ID().Short()) != 12 {
		t.Fatalf("ID %s", s.ID())
	}
	if session.TokenID((session.Token{})) != "" || !(session.Token{}).IsZero() {
		t.Fatal("zero token")
	}
	// The base64 decoder skips '\r' and '\n'; a token must not.
	withCR := secret[:20] + "\r\n" + secret[22:]
	for _, bad := range []string{"", "short", strings.Repeat("=", 46), strings.Repeat("A", 47), withCR, strings.Repeat("\n", 46)} {
		if _, err := session.ParseToken(bad); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("ParseToken(%q) = %v", bad, err)
		}
	}
}

func TestTokensAreRandom(t *testing.T) {
	m, _ := session.New(newMem(t, nil).Sessions(), nil)
	seen := map[string]bool{}
	for range 100 {
		tok, _, err := m.Create(t.Context(), "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok.Reveal()] {
			t.Fatal("a token repeated")
		}
		seen[tok.Reveal()] = true
	}
}
