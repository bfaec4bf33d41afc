// Package secret holds secret text (lease, claim and permit tokens, session
// tokens) so that no formatting path can print it.
//
// fmt calls String, GoString and Format only on values it can reach through
// exported fields; a token held in an unexported field of a caller's struct
// is printed field by field through reflection. A Text therefore keeps its
// text behind a pointer to a string: printed through reflection at any depth
// and with any verb, fmt shows only the pointer's address (it follows
// pointers only to structs, arrays, slices and maps), and every method that
// fmt, log/slog or an encoder can call returns the redacted form. Only
// Reveal gives the text.
package secret

import (
	"fmt"
	"log/slog"
)

// Redacted is what every formatting path prints for a Text.
const Redacted = "REDACTED"

// Text is a secret string. The zero Text holds the empty string. Copies of a
// Text share its text, which never changes.
type Text struct{ p *string }

// New returns a Text holding s.
func New(s string) Text {
	if s == "" {
		return Text{}
	}
	return Text{p: &s}
}

// Reveal returns the secret text. Never log it.
func (t Text) Reveal() string {
	if t.p == nil {
		return ""
	}
	return *t.p
}

// IsZero reports whether t holds the empty string.
func (t Text) IsZero() bool { return t.p == nil || *t.p == "" }

// Equal reports whether t and u hold the same text.
func (t Text) Equal(u Text) bool { return t.Reveal() == u.Reveal() }

// String returns "REDACTED".
func (t Text) String() string { return Redacted }

// GoString returns "REDACTED", for %#v.
func (t Text) GoString() string { return Redacted }

// Format writes "REDACTED" for every verb and flag.
func (t Text) Format(f fmt.State, _ rune) { f.Write([]byte(Redacted)) }

// LogValue returns the redacted form for log/slog.
func (t Text) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalText returns the redacted form, so that encoding/json and other
// text encoders never write the secret.
func (t Text) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
