package session

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/session/driver"
)

// Token layout: 32 random bytes followed by the 2-byte shard of the
// session's user, in unpadded base64url (46 characters).
const (
	secretLen = 32
	shardLen  = 2
	rawLen    = secretLen + shardLen
	tokenLen  = (rawLen*8 + 5) / 6 // unpadded base64
	shardHex  = 2 * shardLen
	digestHex = 2 * sha256.Size
	idLen     = shardHex + digestHex
)

// Token is the secret a client presents to use a session: 32 random bytes
// (plus the 2-byte shard of its user, which lets stores keep a user's
// sessions together) given to the client once, at Create or Rotate. The
// store keeps only its SHA-256 ([TokenID]).
//
// It is tenure.Token, the one secret type of every primitive: it redacts
// itself wherever it might be printed or logged (String, GoString, every
// fmt verb, slog, text and JSON encoding all give "REDACTED"), keeps its
// secret behind a pointer, is compared with Equal (in constant time) and
// tested with IsZero; only Reveal gives the secret, for the cookie or
// header that carries it.
type Token = tenure.Token

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
	return tenure.TokenOf(s), nil
}

// newToken returns a fresh token for a session of the user with shard.
func newToken(shard [shardLen]byte) Token {
	var raw [rawLen]byte
	rand.Read(raw[:secretLen]) // never fails (crypto/rand panics instead)
	copy(raw[secretLen:], shard[:])
	return tenure.TokenOf(base64.RawURLEncoding.EncodeToString(raw[:]))
}

// TokenID returns the store key of the session of token t: the token's
// shard (4 hex digits) followed by the hex SHA-256 of the token. It is not
// a credential: presenting an ID as a token fails. The zero Token has the
// empty ID.
func TokenID(t Token) ID {
	s := t.Reveal()
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
