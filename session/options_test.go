package session_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/tenurekit/tenure/session"
)

// nilStore is a Store implementation whose nil pointer a caller might pass.
type nilStore struct{ session.Store }

// New refuses a nil store and options out of range with ErrInvalid instead
// of panicking then or later.
func TestNewRefusesBadInput(t *testing.T) {
	good := newMem(t, nil).Sessions()
	var typedNil *nilStore
	var nilIface session.Store
	for name, s := range map[string]session.Store{"nil": nil, "nil interface": nilIface, "nil pointer": typedNil} {
		m, err := func() (m *session.Manager, err error) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s store: New panicked: %v", name, p)
				}
			}()
			return session.New(s, nil)
		}()
		if m != nil || !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%s store: New = %v, %v; want ErrInvalid", name, m, err)
		}
	}
	bad := map[string]session.Options{
		"negative idle":           {IdleTimeout: -time.Minute},
		"negative absolute":       {AbsoluteTimeout: -time.Minute},
		"idle below minimum":      {IdleTimeout: time.Microsecond},
		"absolute below minimum":  {AbsoluteTimeout: time.Nanosecond},
		"idle above maximum":      {IdleTimeout: session.MaxTimeout + time.Second},
		"absolute above maximum":  {AbsoluteTimeout: session.MaxTimeout + time.Second},
		"name not a token":        {Cookie: session.CookieOptions{Name: "a;b"}},
		"name with space":         {Cookie: session.CookieOptions{Name: "a b"}},
		"__Host- with path":       {Cookie: session.CookieOptions{Path: "/app"}},
		"__Host- with domain":     {Cookie: session.CookieOptions{Domain: "example.com"}},
		"__Host- insecure":        {Cookie: session.CookieOptions{Name: session.DefaultCookieName, Insecure: true}},
		"__Secure- insecure":      {Cookie: session.CookieOptions{Name: "__Secure-s", Insecure: true}},
		"SameSite=None insecure":  {Cookie: session.CookieOptions{Name: "s", Insecure: true, SameSite: http.SameSiteNoneMode}},
		"unknown SameSite":        {Cookie: session.CookieOptions{SameSite: http.SameSite(9)}},
		"negative SameSite":       {Cookie: session.CookieOptions{SameSite: http.SameSite(-1)}},
		"relative path":           {Cookie: session.CookieOptions{Name: "s", Path: "app"}},
		"path with semicolon":     {Cookie: session.CookieOptions{Name: "s", Path: "/a;Domain=evil.example"}},
		"path with control":       {Cookie: session.CookieOptions{Name: "s", Path: "/a\nb"}},
		"domain not a name":       {Cookie: session.CookieOptions{Name: "s", Domain: "exa mple.com"}},
		"domain with semicolon":   {Cookie: session.CookieOptions{Name: "s", Domain: "example.com;Path=/"}},
		"domain with bad label":   {Cookie: session.CookieOptions{Name: "s", Domain: "-example.com"}},
		"domain empty label":      {Cookie: session.CookieOptions{Name: "s", Domain: "a..b"}},
		"__Host- domain and path": {Cookie: session.CookieOptions{Path: "/x", Domain: "example.com"}},
	}
	for name, o := range bad {
		if m, err := session.New(good, &o); m != nil || !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%s: New = %v, %v; want ErrInvalid", name, m, err)
		}
	}
	ok := map[string]session.Options{
		"defaults":               {},
		"idle longer than abs":   {IdleTimeout: 2 * time.Hour, AbsoluteTimeout: time.Hour},
		"bounds":                 {IdleTimeout: session.MinTimeout, AbsoluteTimeout: session.MaxTimeout},
		"custom cookie":          {Cookie: session.CookieOptions{Name: "sid", Path: "/app", Domain: "example.com", SameSite: http.SameSiteStrictMode}},
		"leading dot domain":     {Cookie: session.CookieOptions{Name: "sid", Domain: ".example.com"}},
		"plain-HTTP dev cookie":  {Cookie: session.CookieOptions{Name: "sid", Insecure: true}},
		"plain-HTTP, one switch": {Cookie: session.CookieOptions{Insecure: true}},
		"SameSite default mode":  {Cookie: session.CookieOptions{SameSite: http.SameSiteDefaultMode}},
		"SameSite=None secure":   {Cookie: session.CookieOptions{SameSite: http.SameSiteNoneMode}},
	}
	for name, o := range ok {
		if m, err := session.New(good, &o); m == nil || err != nil {
			t.Errorf("%s: New = %v, %v; want a Manager", name, m, err)
		}
	}
}
