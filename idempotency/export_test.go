package idempotency

import "net/http"

// Buffered reports how many response body bytes the middleware's recorder
// w holds, and whether w is one.
func Buffered(w http.ResponseWriter) (int, bool) {
	rc, ok := w.(*recorder)
	if !ok {
		return 0, false
	}
	return rc.body.Len(), true
}

// Scope is the middleware's scope of principal and route.
func Scope(principal, route string) string { return scope(principal, route) }

// DefaultPrincipal is the default principal of r under key (nil: the
// default key).
func DefaultPrincipal(key []byte, r *http.Request) string {
	if key == nil {
		key = []byte(defaultCredentialKey)
	}
	return credentialPrincipal(key, r)
}
