package server_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/server"
)

// unknownField matches the name the JSON decoder quotes, at the end of its
// error, for a member the configuration does not have. That name is a key
// the file's author wrote, never a token value, so it may contain anything,
// a token's text included; nothing after it is masked.
var unknownField = regexp.MustCompile(`unknown field ".*"$`)

// FuzzParseConfig: the parser never panics; an accepted configuration
// meets every rule (tokens long enough, with namespaces and operations, a
// write timeout above max_wait); an error never contains a token.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":[""],"operations":["*"]}]}`))
	f.Add([]byte(`{"tokens":[{"name":"a","token":"0123456789abcdef0","prefixes":["x/"],"operations":["read","acquireLease"]}],"max_wait":"5s","timeouts":{"write":"6s"}}`))
	f.Add([]byte(`{"tokens":[{"name":"a","token":"shortsecret","prefixes":[""],"operations":["*"]}]}`))
	f.Add([]byte(`{"rate_limit":{"rate":0},"max_body_bytes":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := server.ParseConfig(b, t.TempDir())
		if err != nil {
			var raw struct {
				Tokens []struct {
					Token string `json:"token"`
				} `json:"tokens"`
			}
			if json.Unmarshal(b, &raw) == nil {
				msg := unknownField.ReplaceAllString(err.Error(), `unknown field "…"`)
				for _, tk := range raw.Tokens {
					if len(tk.Token) >= 8 && strings.Contains(msg, tk.Token) {
						t.Fatalf("error %q contains a token", err)
					}
				}
			}
			return
		}
		if c.WriteTimeout <= c.MaxWait || c.MaxBodyBytes < 1024 {
			t.Fatalf("accepted limits %+v", c)
		}
		for _, tk := range c.Tokens {
			if len(tk.Secret.Reveal()) < server.MinTokenLen || len(tk.Prefixes) == 0 || len(tk.Operations) == 0 || tk.Name == "" {
				t.Fatalf("accepted token %q: %d prefixes, %d operations", tk.Name, len(tk.Prefixes), len(tk.Operations))
			}
		}
	})
}
