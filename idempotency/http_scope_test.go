package idempotency_test

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

// scopeRecorder keeps the scopes of the Begin requests it sees.
type scopeRecorder struct {
	idempotency.Store
	mu     sync.Mutex
	scopes []string
}

func (r *scopeRecorder) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	r.mu.Lock()
	r.scopes = append(r.scopes, b.Scope)
	r.mu.Unlock()
	return r.Store.Begin(ctx, b)
}

// userHandler answers 201 with a Location and a body naming the run.
func userHandler(runs *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := strconv.Itoa(int(runs.Add(1)))
		w.Header().Set("Location", "/orders/"+n)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"order":`+n+`,"for":"`+r.Header.Get("Authorization")+`"}`)
	})
}

func post(h http.Handler, key string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"amount":1}`))
	r.Header.Set(idempotency.HeaderKey, key)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMiddlewareDefaultSeparatesCredentials: with the default options,
// two clients with other credentials (Authorization or Cookie) sending the
// same key and body never get each other's response; the same client gets
// its replay; the scope holds no credential. Anonymous shares explicitly.
func TestMiddlewareDefaultSeparatesCredentials(t *testing.T) {
	rec := &scopeRecorder{Store: newMem(t, nil).Idempotency()}
	k := newKeeper(t, rec, nil)
	var runs atomic.Int32
	h := middleware(t, k, nil)(userHandler(&runs))

	alice := post(h, `"k1"`, "Authorization", "Bearer alice-secret")
	bob := post(h, `"k1"`, "Authorization", "Bearer bob-secret")
	if bob.Code != http.StatusCreated || bob.Header().Get(idempotency.HeaderReplayed) != "" ||
		bob.Header().Get("Location") == alice.Header().Get("Location") || strings.Contains(bob.Body.String(), "alice") {
		t.Fatalf("bob got %d %v %q; want his own run, not alice's response", bob.Code, bob.Header(), bob.Body.String())
	}
	again := post(h, `"k1"`, "Authorization", "Bearer alice-secret")
	if again.Header().Get(idempotency.HeaderReplayed) != "true" || again.Body.String() != alice.Body.String() {
		t.Fatalf("alice's retry: %d %v %q; want her replay", again.Code, again.Header(), again.Body.String())
	}
	c1 := post(h, `"k2"`, "Cookie", "session=one")
	c2 := post(h, `"k2"`, "Cookie", "session=two")
	if c2.Header().Get(idempotency.HeaderReplayed) != "" || c2.Header().Get("Location") == c1.Header().Get("Location") {
		t.Fatalf("other cookie got %v; want its own run", c2.Header())
	}
	// The header lines are separated: moving bytes between them is another
	// principal.
	s1 := post(h, `"k3"`, "Cookie", "a", "Cookie", "b")
	s2 := post(h, `"k3"`, "Cookie", "ab")
	if s2.Header().Get(idempotency.HeaderReplayed) != "" || s1.Header().Get("Location") == s2.Header().Get("Location") {
		t.Fatal("cookie lines a,b and ab share a scope")
	}
	if runs.Load() != 6 {
		t.Fatalf("handler ran %d times, want 6", runs.Load())
	}
	for _, sc := range rec.scopes {
		if strings.Contains(sc, "secret") || strings.Contains(sc, "session") {
			t.Fatalf("scope %q holds a credential", sc)
		}
	}

	// Another CredentialKey gives other scopes.
	keyed := middleware(t, k, &idempotency.HTTPOptions{CredentialKey: []byte("service key")})(userHandler(&runs))
	if w := post(keyed, `"k1"`, "Authorization", "Bearer alice-secret"); w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatal("a keyed middleware replayed a record of the default key")
	}

	// Anonymous: one scope per route, by explicit choice.
	anon := middleware(t, k, &idempotency.HTTPOptions{Anonymous: true})(userHandler(&runs))
	post(anon, `"a"`, "Authorization", "Bearer alice-secret")
	if w := post(anon, `"a"`, "Authorization", "Bearer bob-secret"); w.Header().Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("anonymous: %v, want the shared replay", w.Header())
	}
	if _, err := k.Middleware(&idempotency.HTTPOptions{Anonymous: true, Principal: func(*http.Request) string { return "" }}); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Anonymous with Principal: %v, want ErrInvalid", err)
	}
}

// TestScopeInjective: principals that are not valid UTF-8 or hold NUL, or
// make the scope too long, never share a scope with another principal.
func TestScopeInjective(t *testing.T) {
	pairs := [][2]string{
		{"\xff", "\xfe"},
		{"\x00", "\xff"},
		{"a\x00", "a\ufffd"},
		{"\xff\xff", "\ufffd"},
		{strings.Repeat("u", 600), strings.Repeat("u", 600) + "x"},
		{"sha256:00", "sha256:01"},
	}
	for _, p := range pairs {
		a, b := idempotency.Scope(p[0], "POST /orders"), idempotency.Scope(p[1], "POST /orders")
		if a == b {
			t.Errorf("principals %q and %q share scope %q", p[0], p[1], a)
		}
		for _, sc := range []string{a, b} {
			if err := driver.ValidateID(idempotency.ID{Scope: sc, Key: "k"}); err != nil {
				t.Errorf("scope %q: %v", sc, err)
			}
		}
	}
	// Through the middleware: two principals that collided run separately.
	k := newKeeper(t, newMem(t, nil).Idempotency(), nil)
	var runs atomic.Int32
	h := middleware(t, k, &idempotency.HTTPOptions{Principal: func(r *http.Request) string { return r.Header.Get("X-User") }})(userHandler(&runs))
	first := post(h, `"k"`, "X-User", "\xff")
	second := post(h, `"k"`, "X-User", "\xfe")
	if second.Header().Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 || first.Header().Get("Location") == second.Header().Get("Location") {
		t.Fatalf("principals \\xff and \\xfe: runs %d, second %v; want separate records", runs.Load(), second.Header())
	}
}
