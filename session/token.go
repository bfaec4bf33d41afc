package session

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/session/driver"
)

// Token layout: 32 random bytes followed by the 2-byte shard of the
// session's user, in unpadded base64url (46 characters).
const (
	secretLen  = 32
	shardLen   = 2
	rawLen     = secretLen + shardLen
	tokenLen   = (rawLen*8 + 5) / 6 // unpadded base64
	shardHex   = 2 * shardLen
	digestHex  = 2 * sha256.Size
	idLen      = shardHex + digestHex
	redactText = "session.Token(REDACTED)"
)

// Token is the secret a client presents to use a session: 32 random bytes
// (plus the 2-byte shard of its user, which lets stores keep a user's
// sessions together) given to the client once, at Create or Rotate. The
// store keeps only its SHA-256 ([Token.ID]).
//
// A Token redacts itself wherever it might be printed or logged: String,
// GoString, every fmt verb, slog (LogValue) and text and JSON encoding
// (MarshalText) all give "session.Token(REDACTED)". It keeps its secret
// behind a pointer, so a Token held in an unexported field of another
// struct, which fmt prints field by field without calling its methods,
// shows only an address. Only [Token.Reveal] gives the secret, for the
// cookie or header that carries it.
//
// Tokens are not comparable with ==: use [Token.Equal] to compare two
// tokens and [Token.IsZero] to test for no token.
type Token struct {
	_ [0]func() // not comparable: == would compare pointers, not secrets
	s secret.Text
}

// ParseToken checks that s has the form of a token and returns it. The
// error never contains s. A well-formed token may still name no session.
func ParseToken(s string) (Token, error) {
	if len(s) != tokenLen {
		return Token{}, fmt.Errorf("%w: token must be %d characters", ErrInvalid, tokenLen)
	}
	// The decoder skips '\r' and '\n': a string holding them decodes to
	// fewer bytes.
	if raw, err := base64.RawURLEncoding.Strict().DecodeString(s); err != nil || len(raw) != rawLen {
		return Token{}, fmt.Errorf("%w: token is not unpadded base64url", ErrInvalid)
	}
	return Token{s: secret.New(s)}, nil
}

// newToken returns a fresh token for a session of the user with shard.
func newToken(shard [shardLen]byte) Token {
	var raw [rawLen]byte
	rand.Read(raw[:secretLen]) // never fails (crypto/rand panics instead)
	copy(raw[secretLen:], shard[:])
	return Token{s: secret.New(base64.RawURLEncoding.EncodeToString(raw[:]))}
}

// Reveal returns the secret text of the token, to put in a cookie or a
// header. Never log it.
func (t Token) Reveal() string { return t.s.Reveal() }

// IsZero reports whether t is the zero Token (no token).
func (t Token) IsZero() bool { return t.s.IsZero() }

// Equal reports whether t and u are the same token (both zero, or the same
// secret). The comparison takes the same time wherever the two differ.
func (t Token) Equal(u Token) bool {
	a, b := t.s.Reveal(), u.s.Reveal()
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// ID returns the store key of the token's session: the token's shard (4 hex
// digits) followed by the hex SHA-256 of the token. It is not a credential:
// presenting an ID as a token fails. The zero Token has the empty ID.
func (t Token) ID() ID {
	s := t.s.Reveal()
	if s == "" {
		return ""
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(raw) != rawLen {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	var b [idLen]byte
	hex.Encode(b[:shardHex], raw[secretLen:])
	hex.Encode(b[shardHex:], sum[:])
	return ID(b[:])
}

// String returns "session.Token(REDACTED)".
func (t Token) String() string { return redactText }

// GoString returns "session.Token(REDACTED)", for %#v.
func (t Token) GoString() string { return redactText }

// Format writes "session.Token(REDACTED)" for every verb and flag.
func (t Token) Format(f fmt.State, _ rune) { f.Write([]byte(redactText)) }

// LogValue returns the redacted form for log/slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(redactText) }

// MarshalText returns the redacted form, so that encoding/json and other
// text encoders never write the secret. Use Reveal to send the token.
func (t Token) MarshalText() ([]byte, error) { return []byte(redactText), nil }

// ID is the key of a session in a store: the shard of its user (4 hex
// digits), then the hex SHA-256 of its token (64 hex digits). It names a
// session for listing and revoking; it is not a credential.
type ID = driver.ID

// userShard returns the shard of userID as the token carries it.
func userShard(userID string) [shardLen]byte {
	var s [shardLen]byte
	_, _ = hex.Decode(s[:], []byte(driver.UserShard(userID)))
	return s
}
