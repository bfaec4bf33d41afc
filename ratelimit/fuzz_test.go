package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/limitmem"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// FuzzMiddlewareKeys: every key the middleware builds from request input
// (path, method, headers, user id) is valid after NormalizeKey, which keeps
// valid keys, is deterministic, and never makes a decision fail: under
// FailOpen a request is judged by the store (200 or 429), never counted as
// a store error.
func FuzzMiddlewareKeys(f *testing.F) {
	f.Add("GET", "/login", "alice", "key", "203.0.113.7:1")
	f.Add("GET", "/login\xff", "", "", "@")
	f.Add("POST", "/login\x00", "u|r:x", "\x00", "[2001:db8::1%eth0]:1")
	f.Add("GET", "/"+strings.Repeat("a", MaxKeyLen), strings.Repeat("u", MaxKeyLen), "v", "")
	f.Add("GET", "~h:0123", "~h:", "|", "/run/app.sock")
	f.Fuzz(func(t *testing.T, method, path, user, hdr, remote string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, RemoteAddr: remote}
		r = r.WithContext(context.Background())
		r.Header.Set("X-User", user)
		r.Header["X-Key"] = []string{hdr}
		userFn := User(func(r *http.Request) string { return r.Header.Get("X-User") })
		fns := []KeyFunc{Route(), userFn, Header("X-Key"), ClientIP(nil), Join(userFn, Route()), Const(path)}
		ls := limitmem.New(limitmem.Options{MaxKeys: 1000})
		for i, fn := range fns {
			k, err := fn(r)
			if errors.Is(err, ErrNoKey) {
				continue
			}
			if err != nil {
				t.Fatalf("key func %d: %v", i, err)
			}
			nk := NormalizeKey(k)
			if err := driver.ValidateKey(nk); err != nil {
				t.Fatalf("key func %d: NormalizeKey(%q) = %q: %v", i, k, nk, err)
			}
			if NormalizeKey(k) != nk {
				t.Fatalf("NormalizeKey(%q) not deterministic", k)
			}
			if driver.ValidateKey(k) == nil && !strings.HasPrefix(k, HashedKeyPrefix) && nk != k {
				t.Fatalf("valid key %q changed to %q", k, nk)
			}
			if (nk == k) != (driver.ValidateKey(k) == nil && !strings.HasPrefix(k, HashedKeyPrefix)) {
				t.Fatalf("key %q kept as %q", k, nk)
			}
			l, _ := New(ls, GCRA, Limit{Name: "f" + string(rune('a'+i)), Rate: 1, Period: time.Hour}, nil)
			m, err := NewMiddleware(MiddlewareOptions{Rules: []Rule{{Limiter: l, Key: fn}}, OnFailure: FailOpen})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for want := range []int{200, 429} {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != []int{200, 429}[want] {
					t.Fatalf("key func %d, key %q: request %d answered %d", i, k, want+1, w.Code)
				}
			}
			if st := m.Stats(); st.StoreErrors != 0 || st.Invalid != 0 || st.FailedOpen != 0 {
				t.Fatalf("key func %d, key %q: stats %+v", i, k, st)
			}
		}
	})
}

// FuzzJoin: distinct lists of parts (of the same length) join to distinct
// keys.
func FuzzJoin(f *testing.F) {
	f.Add("u:a|r:x", "y", "u:a", "r:x|y")
	f.Add(`a\`, "b", "a", `\b`)
	f.Add(`a\|`, "b", "a", "|b")
	f.Add("a|", "", "a", "|")
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		a, b := joinKeys([]string{a1, a2}), joinKeys([]string{b1, b2})
		if a == b && (a1 != b1 || a2 != b2) {
			t.Fatalf("Join(%q, %q) = Join(%q, %q) = %q", a1, a2, b1, b2, a)
		}
		if one := joinKeys([]string{a1}); one != joinKeys([]string{b1}) && a1 == b1 {
			t.Fatal("joinKeys is not deterministic")
		}
	})
}

// FuzzClientIP: for any peer address and forwarding headers, with and
// without trusted proxies, ClientIP gives a valid key without error, the
// same key every time; an IPv6 client's key is its /64, the same for every
// address in it and for the prefix's own address.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.7:443", "198.51.100.4, 10.0.0.1", "")
	f.Add("[2001:db8:1:2:3:4:5:6]:443", "", "")
	f.Add("[fe80::1%eth0]:80", "2001:db8::1%25x", "")
	f.Add("[::ffff:10.1.1.1]:1", "[2001:db8:9:9::7]:5555, garbage", "198.51.100.5")
	f.Add("@", "1.2.3.4", "")
	f.Add("", "", "")
	f.Add("10.0.0.1:1", "\xff, ::", "::ffff:1.2.3.4")
	all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	private := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fe80::/10")}
	fns := []KeyFunc{
		ClientIP(nil),
		ClientIP(&IPOptions{TrustedProxies: private}),
		ClientIP(&IPOptions{TrustedProxies: all}),
		ClientIP(&IPOptions{TrustedProxies: private, Header: "X-Real-IP"}),
	}
	f.Fuzz(func(t *testing.T, remote, xff, real string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["X-Real-Ip"] = []string{real}
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				t.Fatalf("config %d: %v", i, err)
			}
			if err := driver.ValidateKey(k); err != nil || (!strings.HasPrefix(k, HashedKeyPrefix) && NormalizeKey(k) != k) {
				t.Fatalf("config %d: key %q is not a valid key the middleware keeps: %v", i, k, err)
			}
			if again, _ := fn(r); again != k {
				t.Fatalf("config %d: %q then %q", i, k, again)
			}
			rest, isIP := strings.CutPrefix(k, "ip:")
			if !isIP {
				if !strings.HasPrefix(k, NonIPPeerPrefix) && !strings.HasPrefix(k, HashedKeyPrefix) {
					t.Fatalf("config %d: key %q", i, k)
				}
				continue
			}
			var a netip.Addr
			if p, err := netip.ParsePrefix(rest); err == nil {
				if p != p.Masked() || !p.Addr().Is6() || p.Bits() != 64 || p.Addr().Zone() != "" {
					t.Fatalf("config %d: key %q: not an IPv6 /64", i, k)
				}
				a = p.Addr()
			} else if a, err = netip.ParseAddr(rest); err != nil || a.Is6() || a.Zone() != "" {
				t.Fatalf("config %d: key %q: not an IPv4 address or an IPv6 /64 (%v)", i, k, err)
			}
			if i != 0 {
				continue
			}
			// Without trusted proxies the key is the peer's: every
			// address of the same /64 (and the prefix itself) gets it.
			same := []netip.Addr{a}
			if a.Is6() {
				b := a.As16()
				for j := 8; j < 16; j++ {
					b[j] = ^b[j]
				}
				same = append(same, netip.AddrFrom16(b))
			}
			for _, s := range same {
				r2 := httptest.NewRequest("GET", "/", nil)
				r2.RemoteAddr = netip.AddrPortFrom(s, 1).String()
				if k2, err := fn(r2); err != nil || k2 != k {
					t.Fatalf("peer %v: key %q, %v; want %q (from %q)", s, k2, err, k, remote)
				}
			}
		}
	})
}
