package redisstore

import (
	"github.com/tenurekit/tenure/idempotency/driver"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

// FuzzIdempotencyKey checks that List's parsing of record keys inverts
// the store's key layout: every valid ID's key parses back to that ID,
// and any string that parses is exactly the key of a valid ID.
func FuzzIdempotencyKey(f *testing.F) {
	f.Add("user:42 POST /charges", "pay-1", "tenure:")
	f.Add("a{b}%c", "k}{%7B", "app{x}:")
	f.Add("5:alice POST /orders", "%25", "")
	f.Add("7:", "0:", "p%")
	f.Fuzz(func(t *testing.T, scope, key, prefix string) {
		s := &Store{prefix: DefaultPrefix}
		if prefix != "" {
			s.prefix = escape(prefix)
		}
		id := idempotency.ID{Scope: scope, Key: key}
		k := s.idemKey(id)
		got, ok := s.idemID(k)
		if driver.ValidateID(id) == nil && (!ok || got != id) {
			t.Fatalf("key %q of %+v parsed as %+v, %v", k, id, got, ok)
		}
		for _, raw := range []string{scope, key, s.prefix + "idem{" + scope + "}", k + key, strings.TrimSuffix(k, "}")} {
			if got, ok := s.idemID(raw); ok {
				if again := s.idemKey(got); again != raw || driver.ValidateID(got) != nil {
					t.Fatalf("%q parsed as %+v, whose key is %q", raw, got, again)
				}
			}
		}
		if u, ok := unescape(escape(scope)); !ok || u != scope {
			t.Fatalf("unescape(escape(%q)) = %q, %v", scope, u, ok)
		}
	})
}

// TestGlobEscape checks that List's MATCH pattern matches the prefix
// literally.
func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?c[d]e\f`); got != `a\*b\?c\[d\]e\\f` {
		t.Fatalf("globEscape = %q", got)
	}
}
