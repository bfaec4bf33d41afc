package session_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
)

func Example() {
	ctx := context.Background()
	store, err := memstore.New(nil) // or sqlitestore, pgstore, redisstore
	if err != nil {
		panic(err)
	}
	m, err := session.New(store.Sessions(), nil)
	if err != nil {
		panic(err)
	}

	// Login: the token goes to the client once; the store keeps its hash.
	tok, s, err := m.Create(ctx, "alice", map[string]string{"role": "user"})
	if err != nil {
		panic(err)
	}
	fmt.Println("created version", s.Version())

	// Two requests load the session; both change it.
	a, _ := m.Load(ctx, tok)
	b, _ := m.Load(ctx, tok)
	a.Set("cart", "apples")
	b.Set("cart", "pears")
	fmt.Println("save a:", m.Save(ctx, a))
	fmt.Println("save b conflicts:", errors.Is(m.Save(ctx, b), session.ErrConflict))

	// Privilege change: a new token, the old one is dead at once.
	newTok, err := m.Rotate(ctx, a)
	if err != nil {
		panic(err)
	}
	_, err = m.Load(ctx, tok)
	fmt.Println("old token:", err)

	// Logout, then a late save from a request that loaded before it.
	late, _ := m.Load(ctx, newTok)
	if err := m.Revoke(ctx, late.ID()); err != nil {
		panic(err)
	}
	late.Set("cart", "everything")
	fmt.Println("late save:", m.Save(ctx, late))
	_, err = m.Load(ctx, newTok)
	fmt.Println("after logout:", err)
	// Output:
	// created version 1
	// save a: <nil>
	// save b conflicts: true
	// old token: session: not found
	// late save: session: not found
	// after logout: session: not found
}

func ExampleToken() {
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	m, _ := session.New(mem.Sessions(), nil)
	tok, _, _ := m.Create(context.Background(), "alice", nil)
	fmt.Println(tok)
	fmt.Printf("%v %q %#v\n", tok, tok, tok)
	fmt.Println(len(tok.Reveal()), "characters in the cookie")
	// Output:
	// REDACTED
	// REDACTED REDACTED REDACTED
	// 46 characters in the cookie
}

func ExampleManager_Handler() {
	mem, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	m, _ := session.New(mem.Sessions(), nil)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		// ... check the credentials, then:
		if _, err := m.Login(w, r, "alice", nil); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /me", func(w http.ResponseWriter, r *http.Request) {
		s := session.FromContext(r.Context())
		if s == nil {
			http.Error(w, "please log in", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "hello", s.UserID())
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		m.Logout(w, r)
	})
	h := m.Handler(mux)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "https://example.com/login", nil))
	cookie := w.Result().Cookies()[0]
	fmt.Println(strings.SplitN(w.Header().Get("Set-Cookie"), ";", 2)[1])
	fmt.Println("Cache-Control:", w.Header().Get("Cache-Control"))

	r := httptest.NewRequest("GET", "https://example.com/me", nil)
	r.AddCookie(cookie)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Print(w.Body)

	r = httptest.NewRequest("POST", "https://example.com/logout", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site") // a forged cross-site logout
	r.AddCookie(cookie)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println("cross-site POST:", w.Code)
	// Output:
	//  Path=/; HttpOnly; Secure; SameSite=Lax
	// Cache-Control: no-store
	// hello alice
	// cross-site POST: 403
}
