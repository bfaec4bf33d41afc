package tenure

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
)

// Redacted is what every formatting path prints for a Token.
const Redacted = "REDACTED"

// Token is a secret: a lease's token (the proof that its holder holds it),
// an idempotency claim's token, a session's token. Every primitive hands
// its secrets out as a Token, and a Token redacts itself wherever it might
// be printed or logged: String, GoString, every fmt verb, log/slog
// (LogValue) and text and JSON encoding (MarshalText) all give
// "REDACTED". Only [Token.Reveal] gives the secret, for the guard, cookie
// or header that needs it.
//
// fmt calls those methods only on values it reaches through exported
// fields; a Token held in an unexported field of another struct is printed
// field by field, so a Token keeps its secret behind a pointer and fmt
// shows only an address. Tokens are not comparable with ==: use
// [Token.Equal] to compare two and [Token.IsZero] to test for none. Copies
// of a Token share its secret, which never changes.
type Token struct {
	_ [0]func() // not comparable: == would compare pointers, not secrets
	p *string
}

// TokenOf returns s as a Token; the empty string gives the zero Token.
func TokenOf(s string) Token {
	if s == "" {
		return Token{}
	}
	return Token{p: &s}
}

// Reveal returns the secret. Never log it.
func (t Token) Reveal() string {
	if t.p == nil {
		return ""
	}
	return *t.p
}

// IsZero reports whether t is the zero Token (no secret).
func (t Token) IsZero() bool { return t.p == nil || *t.p == "" }

// Equal reports whether t and u hold the same secret (or are both zero).
// The comparison takes the same time wherever the two differ.
func (t Token) Equal(u Token) bool {
	a, b := t.Reveal(), u.Reveal()
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// String returns "REDACTED".
func (t Token) String() string { return Redacted }

// GoString returns "REDACTED", for %#v.
func (t Token) GoString() string { return Redacted }

// Format writes "REDACTED" for every verb and flag.
func (t Token) Format(f fmt.State, _ rune) { f.Write([]byte(Redacted)) }

// LogValue returns the redacted form for log/slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalText returns the redacted form, so that encoding/json and other
// text encoders never write the secret. Use Reveal to send it.
func (t Token) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
