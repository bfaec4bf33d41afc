package idempotency_test

import (
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

// sfString serializes key as an RFC 8941 sf-string.
func sfString(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

// FuzzParseKey: ParseKey never panics; what it accepts is a valid key
// (1 to MaxKeyLen bytes of printable ASCII) that serializes back to a
// field value ParseKey reads as the same key; what it refuses wraps
// ErrBadKey or is ErrMissingKey.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b\\c"`, ` "x" `, `abc`, `"a";p=1`, `"`, `"\q"`, `""`, `"é"`, `"a" "b"`, `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := idempotency.ParseKey([]string{v})
		if err != nil {
			if !errors.Is(err, idempotency.ErrBadKey) {
				t.Fatalf("ParseKey(%q): %v, want ErrBadKey", v, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q) returned %q with an error", v, key)
			}
			return
		}
		if err := driver.ValidateKey(key); err != nil {
			t.Fatalf("ParseKey(%q) = %q, not a valid key: %v", v, key, err)
		}
		again, err := idempotency.ParseKey([]string{sfString(key)})
		if err != nil || again != key {
			t.Fatalf("round trip of %q: %q %v", key, again, err)
		}
		if strict, err := idempotency.ParseKeyStrict([]string{v}); err == nil && strict != key {
			t.Fatalf("ParseKeyStrict(%q) = %q, ParseKey = %q", v, strict, key)
		}
		if bare := strings.Trim(v, " \t"); !strings.HasPrefix(bare, `"`) && bare != key {
			t.Fatalf("bare key %q parsed as %q", bare, key)
		}
		if _, err := idempotency.ParseKey([]string{v, v}); !errors.Is(err, idempotency.ErrBadKey) {
			t.Fatalf("two lines accepted: %v", err)
		}
	})
}

// FuzzScope: the middleware's scope is always a valid scope, and two
// different (principal, route) pairs never give the same scope.
func FuzzScope(f *testing.F) {
	f.Add("alice", "POST /orders", "bob", "POST /orders")
	f.Add("\xff", "POST /x", "\xfe", "POST /x")
	f.Add("a\x00", "r", "a\ufffd", "r")
	f.Add("a b", "c", "a", "b c")
	f.Add(strings.Repeat("p", 600), "r", strings.Repeat("p", 600), "s")
	f.Add("", "1:x r", "1:x", "r")
	f.Fuzz(func(t *testing.T, p1, r1, p2, r2 string) {
		s1, s2 := idempotency.Scope(p1, r1), idempotency.Scope(p2, r2)
		for _, s := range []string{s1, s2} {
			if err := driver.ValidateID(idempotency.ID{Scope: s, Key: "k"}); err != nil {
				t.Fatalf("scope %q is not valid: %v", s, err)
			}
		}
		if (p1 != p2 || r1 != r2) && s1 == s2 {
			t.Fatalf("(%q, %q) and (%q, %q) share scope %q", p1, r1, p2, r2, s1)
		}
		if s1 != idempotency.Scope(p1, r1) {
			t.Fatal("scope is not deterministic")
		}
	})
}
