package rls

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

// splitEscaped inverts joinEscaped: that it exists proves joinEscaped
// injective.
func splitEscaped(s string) []string {
	var parts []string
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '|':
			parts = append(parts, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(parts, b.String())
}

func entries(kv []string) []*rlcommon.RateLimitDescriptor_Entry {
	var es []*rlcommon.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// checkKey asserts the properties of descriptorKey for domain and kv: the
// same form as ratelimit.Join, a valid key, and, when kept as it is, one
// that splits back into its parts.
func checkKey(t *testing.T, domain string, kv []string) string {
	t.Helper()
	parts := append([]string{domain}, kv...)
	joined := joinEscaped(parts)
	fns := make([]ratelimit.KeyFunc, len(parts))
	for i, p := range parts {
		fns[i] = ratelimit.Const(p)
	}
	if viaJoin, err := ratelimit.Join(fns...)(nil); err != nil || viaJoin != joined {
		t.Fatalf("joinEscaped(%q) = %q, ratelimit.Join gives %q (%v)", parts, joined, viaJoin, err)
	}
	if got := splitEscaped(joined); !reflect.DeepEqual(got, parts) {
		t.Fatalf("joinEscaped(%q) = %q splits back into %q", parts, joined, got)
	}
	k := descriptorKey(domain, entries(kv))
	if err := driver.ValidateKey(k); err != nil {
		t.Fatalf("descriptorKey(%q, %q) = %q: %v", domain, kv, k, err)
	}
	if k != joined && !strings.HasPrefix(k, ratelimit.HashedKeyPrefix) {
		t.Fatalf("descriptorKey(%q, %q) = %q, neither the joined form nor hashed", domain, kv, k)
	}
	return k
}

// TestDescriptorKey checks that descriptor keys tell apart the inputs a
// plain join would mix up, and hash what is not a valid key.
func TestDescriptorKey(t *testing.T) {
	cases := [][]string{
		{"d", "a|b", "c"}, {"d", "a", "b|c"}, {"d|a", "b", "c"},
		{"d", "a\\", "|c"}, {"d", "a\\|", "c"}, {"d", "a", ""}, {"d", "a", "", "", ""},
		{"d", "k", "\x00"}, {"d", "k", "\xff"}, {"d", "k", strings.Repeat("v", 600)},
		{"d", "k", ratelimit.HashedKeyPrefix + "x"},
	}
	seen := map[string][]string{}
	for _, c := range cases {
		k := checkKey(t, c[0], c[1:])
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", prev, c, k)
		}
		seen[k] = c
	}
	if k := descriptorKey("d", entries([]string{"k", "\x00"})); !strings.HasPrefix(k, ratelimit.HashedKeyPrefix) {
		t.Errorf("a key with NUL was kept: %q", k)
	}
}

// FuzzDescriptorKey: keys are valid, have ratelimit.Join's form when kept,
// split back into their parts, and differ for different descriptors.
func FuzzDescriptorKey(f *testing.F) {
	f.Add("edge", "a|b", "c", "a", "b|c")
	f.Add("edge", "k\\", "|", "k", "\\|")
	f.Add("d", "k", "\x00", "k", "")
	f.Add("d", ratelimit.HashedKeyPrefix, "v", "", "")
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string) {
		a := checkKey(t, domain, []string{k1, v1})
		b := checkKey(t, domain, []string{k2, v2})
		c := checkKey(t, domain, []string{k1, v1, k2, v2})
		if (a == b) != (k1 == k2 && v1 == v2) {
			t.Fatalf("(%q,%q) and (%q,%q): keys %q and %q", k1, v1, k2, v2, a, b)
		}
		if c == a || c == b {
			t.Fatalf("a two-entry descriptor shares a one-entry descriptor's key %q", c)
		}
	})
}

// TestMatch checks rule selection: exact value before wildcard before no
// value, the rule of the node the last entry reaches, nothing for
// descriptors deeper than the tree.
func TestMatch(t *testing.T) {
	cfg, err := Parse([]byte(`{"domain":"d","descriptors":[
		{"key":"k","rate_limit":{"name":"any","unit":"second","requests_per_unit":1},
		 "descriptors":[{"key":"p","rate_limit":{"name":"any-p","unit":"second","requests_per_unit":1}}]},
		{"key":"k","value":"ab*","rate_limit":{"name":"wild","unit":"second","requests_per_unit":1}},
		{"key":"k","value":"abc","rate_limit":{"name":"exact","unit":"second","requests_per_unit":1}},
		{"key":"n","descriptors":[{"key":"m","value":"v","rate_limit":{"name":"deep","unit":"second","requests_per_unit":1}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dom := c.domains["d"]
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"k", "abc"}, "exact"},
		{[]string{"k", "abd"}, "wild"},
		{[]string{"k", "ab"}, "wild"},
		{[]string{"k", "x"}, "any"},
		{[]string{"k", "x", "p", "1"}, "any-p"},
		{[]string{"k", "abc", "p", "1"}, ""}, // the exact node has no children
		{[]string{"k", "x", "p", "1", "q", "2"}, ""},
		{[]string{"n", "1"}, ""}, // no rule at this depth
		{[]string{"n", "1", "m", "v"}, "deep"},
		{[]string{"n", "1", "m", "w"}, ""},
		{[]string{"z", "1"}, ""},
		{nil, ""},
	} {
		r := dom.match(entries(tc.kv))
		got := ""
		if r != nil {
			got = r.limit.Name
		}
		if got != tc.want {
			t.Errorf("%q: rule %q, want %q", tc.kv, got, tc.want)
		}
	}
}

// TestNames: derived limit names are stable, valid and distinct per rule
// and parameters; group names keep domains apart.
func TestNames(t *testing.T) {
	src := `{"domain":"d","descriptors":[{"key":"remote address!","rate_limit":{"unit":"second","requests_per_unit":5}},{"key":"remote address!","value":"x","rate_limit":{"unit":"second","requests_per_unit":5}}]}`
	names := func() []string {
		c, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := compile(c)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, r := range cc.rules {
			ns = append(ns, r.limit.Name)
		}
		return ns
	}
	a, b := names(), names()
	if !reflect.DeepEqual(a, b) || a[0] == a[1] || !strings.HasPrefix(a[0], "remote_address_-") {
		t.Errorf("names %q then %q", a, b)
	}
	for _, d := range []string{"edge", "a b", strings.Repeat("x", 70), "rls-x"} {
		g := groupName(d)
		if _, err := ratelimit.New(nopStore{}, ratelimit.GCRA, ratelimit.Limit{Name: g, Rate: 1, Period: 1e9}, nil); err != nil {
			t.Errorf("group name %q of %q: %v", g, d, err)
		}
	}
	if groupName("a b") == groupName("a_b") {
		t.Error("group names collide")
	}
}

// FuzzParse: Parse never panics; a configuration it accepts survives a
// round trip through its JSON form unchanged and still compiles.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"domain":"edge","descriptors":[{"key":"k","value":"v*","shadow_mode":true,"rate_limit":{"unit":"minute","requests_per_unit":3}}]}`))
	f.Add([]byte(`{"domains":[{"domain":"a","descriptors":[{"key":"k","descriptors":[{"key":"j","rate_limit":{"unlimited":true}}]}]}],"response_headers":{"disabled":true}}`))
	f.Add([]byte(`{"domain":"a","descriptors":[{"key":"k","rate_limit":{"name":"n","unit":"DAY","requests_per_unit":9,"algorithm":"sliding-log"}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(j)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", j, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the configuration:\n%#v\n%#v", c, c2)
		}
	})
}
