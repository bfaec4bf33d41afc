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

import "github.com/tenurekit/tenure"

// Redacted is what every formatting path prints for a Text.
const Redacted = tenure.Redacted

// Text is a secret string: tenure.Token, under the name the packages that
// hold secrets use for it. The zero Text holds the empty string.
type Text = tenure.Token

// New returns a Text holding s.
func New(s string) Text { return tenure.TokenOf(s) }
