package session_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/session"
)

// wellFormed reports whether s has the form of a token: 46 characters of
// unpadded base64url (34 bytes).
func wellFormed(s string) bool {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(s) == 46 && len(raw) == 34
}

// FuzzParseToken: ParseToken never panics, accepts exactly the well-formed
// strings and gives them back unchanged; the ID of a token always
// validates, carries the token's shard, and is never the token nor
// accepted as one. raw builds a well-formed token from any 34 bytes.
func FuzzParseToken(f *testing.F) {
	f.Add("", []byte(nil))
	f.Add(strings.Repeat("A", 46), []byte("0123456789abcdef0123456789abcdef\x00\x01"))
	f.Add(strings.Repeat("_", 45)+"-", []byte{0xff})
	f.Add(strings.Repeat("A", 45)+"B", []byte(nil)) // non-canonical last character
	f.Add(strings.Repeat("A", 44)+"==", []byte(nil))
	f.Add(strings.Repeat("+", 46), []byte(nil))
	f.Add(strings.Repeat("a", 68), []byte(nil))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		check := func(s string) {
			tok, err := session.ParseToken(s)
			if (err == nil) != wellFormed(s) {
				t.Fatalf("ParseToken(%q): err %v, well-formed %v", s, err, wellFormed(s))
			}
			if (err == nil) != (s != "" && tok.Reveal() == s) {
				t.Fatalf("ParseToken(%q): err %v but Reveal %q", s, err, tok.Reveal())
			}
			if err != nil {
				if !errors.Is(err, session.ErrInvalid) || !tok.IsZero() || session.TokenID(tok) != "" {
					t.Fatalf("ParseToken(%q): err %v, zero %v, ID %q", s, err, tok.IsZero(), session.TokenID(tok))
				}
				if len(s) >= 4 && strings.Contains(err.Error(), s) {
					t.Fatalf("the error holds the input: %v", err)
				}
				return
			}
			id := session.TokenID(tok)
			if err := id.Validate(); err != nil {
				t.Fatalf("the ID of a token does not validate: %v", err)
			}
			if string(id) == s || strings.Contains(string(id), s) {
				t.Fatal("the ID is, or holds, the token")
			}
			dec, _ := base64.RawURLEncoding.DecodeString(s)
			if id.Shard() != hex.EncodeToString(dec[32:]) || len(id.Short()) != 12 {
				t.Fatalf("ID %s: shard %q, want %x", id, id.Shard(), dec[32:])
			}
			if _, err := session.ParseToken(string(id)); !errors.Is(err, session.ErrInvalid) {
				t.Fatalf("an ID parsed as a token: %v", err)
			}
			again, err := session.ParseToken(tok.Reveal())
			if err != nil || !again.Equal(tok) || session.TokenID(again) != id {
				t.Fatalf("round trip: %v", err)
			}
			if out := fmt.Sprintf("%v %+v %#v %s %q %x %+v", tok, tok, tok, &tok, []session.Token{tok}, tok, struct{ t session.Token }{tok}); strings.Contains(out, s) || strings.Contains(out, fmt.Sprintf("%x", s)) {
				t.Fatalf("printing shows the token: %s", out)
			}
		}
		check(s)
		var b [34]byte
		copy(b[:], raw)
		check(base64.RawURLEncoding.EncodeToString(b[:]))
	})
}

// FuzzIDValidate: Validate accepts exactly 68 lower-case hex digits, and
// Shard and Short never panic and cut a valid ID where documented.
func FuzzIDValidate(f *testing.F) {
	f.Add("")
	f.Add(strings.Repeat("0", 68))
	f.Add(strings.Repeat("f", 67) + "F")
	f.Add(strings.Repeat("a", 69))
	f.Add("abc")
	f.Fuzz(func(t *testing.T, s string) {
		id := session.ID(s)
		err := id.Validate()
		want := len(s) == 68 && strings.Trim(s, "0123456789abcdef") == ""
		if (err == nil) != want {
			t.Fatalf("Validate(%q) = %v", s, err)
		}
		if err != nil && !errors.Is(err, session.ErrInvalid) {
			t.Fatalf("Validate(%q) = %v, not ErrInvalid", s, err)
		}
		shard, short := id.Shard(), id.Short()
		if want && (shard != s[:4] || short != s[4:16]) {
			t.Fatalf("ID %q: shard %q, short %q", s, shard, short)
		}
		if len(s) >= 4 && shard != s[:4] || len(s) < 4 && shard != "" {
			t.Fatalf("Shard(%q) = %q", s, shard)
		}
		if len(s) != 68 && short != "" {
			t.Fatalf("Short(%q) = %q", s, short)
		}
	})
}

// FuzzSessionCookies sends any Cookie header, with the cookie of a live
// session before it, after it or not at all, through the middleware: it
// never fails the request, uses the live session exactly when that cookie
// is among the first MaxSessionCookies well-formed cookies of the name,
// clears the cookie only when every cookie of the name was tried and none
// is live, and never ends the live session.
func FuzzSessionCookies(f *testing.F) {
	name := session.DefaultCookieName
	forged := strings.Repeat("A", 46)
	f.Add("", uint8(0))
	f.Add("", uint8(1))
	f.Add(name+"=garbage", uint8(2))
	f.Add(name+"="+forged, uint8(2))
	f.Add(name+"="+forged+"; "+name+"="+forged+"; "+name+"="+forged, uint8(2))
	f.Add(name+"="+forged+"; "+name+"="+forged+"; "+name+"="+forged+"; "+name+"="+forged, uint8(2))
	f.Add(`other=1; `+name+`="`+forged+`"; `+name+`=`, uint8(1))
	f.Add(name+"=;;;"+name+"=\x00\r\n", uint8(2))

	m, err := session.New(newMem(f, nil).Sessions(), nil)
	if err != nil {
		f.Fatal(err)
	}
	live, _, err := m.Create(f.Context(), "alice", nil)
	if err != nil {
		f.Fatal(err)
	}
	valid := live.Reveal()
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := session.FromContext(r.Context()); s != nil {
			w.Write([]byte(s.UserID()))
			return
		}
		w.Write([]byte("anonymous"))
	}))

	f.Fuzz(func(t *testing.T, header string, where uint8) {
		if strings.Contains(header, valid) {
			t.Skip() // only the test knows the live token
		}
		switch where % 3 {
		case 1:
			header = name + "=" + valid + "; " + header
		case 2:
			header += "; " + name + "=" + valid
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Cookie", header)

		// What the documented rule expects.
		sent, formed, liveAt := 0, 0, -1
		for _, c := range r.CookiesNamed(name) {
			if c.Value == "" {
				continue
			}
			sent++
			if !wellFormed(c.Value) {
				continue
			}
			if c.Value == valid && liveAt < 0 {
				liveAt = formed
			}
			formed++
		}
		wantLive := liveAt >= 0 && liveAt < session.MaxSessionCookies
		wantClear := !wantLive && sent > 0 && formed <= session.MaxSessionCookies

		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d for Cookie %q", w.Code, header)
		}
		if got := w.Body.String(); (got == "alice") != wantLive || got != "alice" && got != "anonymous" {
			t.Fatalf("body %q for Cookie %q; want the session %v", got, header, wantLive)
		}
		setCookie := w.Header().Values("Set-Cookie")
		if cleared := len(setCookie) == 1 && strings.Contains(setCookie[0], "Max-Age=0"); cleared != wantClear || len(setCookie) > 1 {
			t.Fatalf("Set-Cookie %q for Cookie %q; want cleared %v", setCookie, header, wantClear)
		}
		if !strings.Contains(strings.Join(w.Header().Values("Vary"), ","), "Cookie") {
			t.Fatal("no Vary: Cookie")
		}
		if _, err := m.Load(t.Context(), live); err != nil {
			t.Fatalf("the live session is gone after Cookie %q: %v", header, err)
		}
	})
}
