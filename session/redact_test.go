package session_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/session"
)

// Structs a caller might keep a token in.
type (
	hidden        struct{ tok session.Token }
	hiddenPtr     struct{ tok *session.Token }
	shown         struct{ Tok session.Token }
	deep          struct{ inner hidden }
	deepShown     struct{ Inner shown }
	hiddenSlice   struct{ toks []session.Token }
	hiddenMap     struct{ toks map[string]session.Token }
	hiddenAny     struct{ v any }
	loginResponse struct {
		user string
		tok  session.Token
		sess *session.Session
	}
)

// printables returns every shape in which a caller might hold tok (and
// what Create returned with it).
func printables(tok session.Token, s *session.Session) map[string]any {
	return map[string]any{
		"value":             tok,
		"pointer":           &tok,
		"unexported":        hidden{tok},
		"unexported ptr":    &hidden{tok},
		"unexported *Token": hiddenPtr{&tok},
		"exported":          shown{tok},
		"exported ptr":      &shown{tok},
		"nested unexported": deep{hidden{tok}},
		"nested exported":   deepShown{shown{tok}},
		"nested ptr":        &deep{hidden{tok}},
		"slice":             []session.Token{tok, tok},
		"slice of ptrs":     []*session.Token{&tok},
		"map":               map[string]session.Token{"k": tok},
		"unexported slice":  hiddenSlice{[]session.Token{tok}},
		"unexported map":    hiddenMap{map[string]session.Token{"k": tok}},
		"unexported any":    hiddenAny{tok},
		"array":             [1]session.Token{tok},
		"create result":     loginResponse{"alice", tok, s},
		"create result ptr": &loginResponse{"alice", tok, s},
		"session":           s,
		"session value":     hiddenAny{s},
	}
}

// No fmt verb, slog handler or encoder prints a token, whatever holds it.
func TestTokenRedactedEverywhere(t *testing.T) {
	m, err := session.New(newMem(t, nil).Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, s, err := m.Create(t.Context(), "alice", map[string]string{"role": "user"})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := m.Rotate(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []session.Token{tok, rot} {
		secret := tk.Reveal()
		leaks := func(what, out string) {
			t.Helper()
			// Any 12 consecutive characters of the secret count as a leak;
			// so does its hex encoding (the %x verb).
			hexed := fmt.Sprintf("%x", secret)
			for i := 0; i+12 <= len(secret); i++ {
				if strings.Contains(out, secret[i:i+12]) {
					t.Errorf("%s prints the token: %s", what, out)
					return
				}
			}
			if strings.Contains(out, hexed[:24]) {
				t.Errorf("%s prints the token in hex: %s", what, out)
			}
		}
		for name, v := range printables(tk, s) {
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.4v"} {
				leaks(name+" "+verb, fmt.Sprintf(verb, v))
			}
			leaks(name+" Sprint", fmt.Sprint(v))
			leaks(name+" Sprintln", fmt.Sprintln(v))
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "v", v, slog.Group("g", "v", v))
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "v", v, slog.Group("g", "v", v))
			leaks(name+" slog", buf.String())
			if js, err := json.Marshal(v); err == nil {
				leaks(name+" json", string(js))
			}
		}
		if tk.String() != "REDACTED" || fmt.Sprint(tk) != "REDACTED" {
			t.Errorf("String = %q, Sprint = %q", tk.String(), fmt.Sprint(tk))
		}
	}
}

// A token keeps its text through ParseToken; Equal compares the secrets.
func TestTokenEqual(t *testing.T) {
	m, _ := session.New(newMem(t, nil).Sessions(), nil)
	tok, _, err := m.Create(t.Context(), "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := m.Create(t.Context(), "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := session.ParseToken(tok.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(tok) || !tok.Equal(back) || session.TokenID(back) != session.TokenID(tok) || back.Reveal() != tok.Reveal() {
		t.Fatal("a parsed token differs from the one it was printed from")
	}
	if tok.Equal(other) || tok.Equal(session.Token{}) || !(session.Token{}).Equal(session.Token{}) {
		t.Fatal("Equal: different tokens compare equal, or zero tokens differ")
	}
}
