package rls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"go.yaml.in/yaml/v3"
)

// ErrConfig reports a configuration that cannot be used; it also wraps
// ratelimit.ErrInvalid. The message names the domain and the descriptor
// path at fault.
var ErrConfig = fmt.Errorf("rls: invalid configuration: %w", ratelimit.ErrInvalid)

// Default response header names (see Headers).
const (
	DefaultLimitHeader     = "x-ratelimit-limit"
	DefaultRemainingHeader = "x-ratelimit-remaining"
	DefaultResetHeader     = "x-ratelimit-reset"
)

// MaxDepth is the deepest descriptor nesting a configuration may have.
const MaxDepth = 16

// Config is the rate limit service's configuration: the domains and their
// descriptors in the shape of envoyproxy/ratelimit's files, and the
// response headers. Its JSON form is what Parse and LoadFile read, so it
// can be embedded as a field of a larger JSON configuration (tenure serve's
// "rls" section). The zero value of every field means its default.
type Config struct {
	// Domains are the rate limit domains, each with its own descriptor
	// tree. Domain names must be distinct.
	Domains []Domain `json:"domains"`
	// Headers configures the response headers Envoy adds to the
	// downstream response. Nil: the defaults (on, x-ratelimit-*).
	Headers *Headers `json:"response_headers,omitempty"`
}

// Domain is one rate limit domain: the domain an Envoy rate limit filter
// names in its requests, and the descriptors configured under it.
type Domain struct {
	// Domain is the domain's name; required.
	Domain string `json:"domain"`
	// Descriptors are the first level of the descriptor tree.
	Descriptors []Descriptor `json:"descriptors"`
}

// Descriptor matches one entry (key, value) of a request descriptor, at
// its depth in the tree.
type Descriptor struct {
	// Key is the entry's key; required.
	Key string `json:"key"`
	// Value, when set, matches only entries with this value; a value
	// ending in '*' matches every value with the prefix before it. Empty:
	// any value, each value with its own counter. An exact value is
	// preferred to a wildcard, and a wildcard to an empty value.
	Value string `json:"value,omitempty"`
	// RateLimit is the limit applied to request descriptors whose last
	// entry matches here. Nil: none at this depth.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// ShadowMode evaluates and counts the limit but never makes a request
	// over limit: its status is OK, and it is left out of the response
	// headers.
	ShadowMode bool `json:"shadow_mode,omitempty"`
	// Descriptors match the next entry of a request descriptor.
	Descriptors []Descriptor `json:"descriptors,omitempty"`
}

// RateLimit is the limit of one descriptor.
type RateLimit struct {
	// Name is the limit's name, reported in DescriptorStatus.current_limit
	// and naming its state in the store: ratelimit's rules for limit names
	// (1 to 64 letters, digits, '.', '_', '-'). Default: derived from the
	// descriptor's path and the limit's parameters, e.g.
	// "remote_address-5f0c3e9a1b2d" (so a changed limit starts with fresh
	// state).
	Name string `json:"name,omitempty"`
	// Unit is "second", "minute", "hour", "day", "week", "month" (30 days)
	// or "year" (365 days), in any case; required unless Unlimited.
	Unit string `json:"unit,omitempty"`
	// RequestsPerUnit is the number of hits admitted per Unit: 1 to
	// ratelimit.MaxRate; required unless Unlimited.
	RequestsPerUnit int `json:"requests_per_unit,omitempty"`
	// Unlimited answers OK without asking the store. Unit and
	// RequestsPerUnit must then be unset.
	Unlimited bool `json:"unlimited,omitempty"`
	// Algorithm is the tenure algorithm enforcing the limit: "gcra" (the
	// default), "fixed-window", "sliding-window" or "sliding-log".
	Algorithm string `json:"algorithm,omitempty"`
	// Burst is the GCRA bucket size. Default RequestsPerUnit; only for
	// gcra.
	Burst int `json:"burst,omitempty"`
}

// Headers configures the response headers the service asks Envoy to add
// (RateLimitResponse.response_headers_to_add). They describe the
// descriptor closest to its limit: the first over-limit one, or else the
// one with the fewest remaining hits; shadow-mode and unlimited
// descriptors are left out. Limit is its requests_per_unit, Remaining its
// limit_remaining, Reset its duration_until_reset in whole seconds
// (rounded up).
type Headers struct {
	// Disabled turns the headers off (for instance when Envoy's own
	// enable_x_ratelimit_headers is used instead).
	Disabled bool `json:"disabled,omitempty"`
	// Limit, Remaining and Reset are the header names. Defaults:
	// DefaultLimitHeader, DefaultRemainingHeader, DefaultResetHeader.
	Limit     string `json:"limit,omitempty"`
	Remaining string `json:"remaining,omitempty"`
	Reset     string `json:"reset,omitempty"`
}

// Parse reads a configuration in its JSON form. A document with a
// top-level "domain" (one domain, as envoyproxy/ratelimit's files have it)
// is read as a configuration of that single domain. Unknown fields are
// errors. The configuration is validated (see Validate). Errors wrap
// ErrConfig.
func Parse(b []byte) (*Config, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c := &Config{}
	var err error
	if _, one := probe["domain"]; one {
		var d Domain
		err = decodeStrict(b, &d)
		c.Domains = []Domain{d}
	} else {
		err = decodeStrict(b, c)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	for i := range c.Domains {
		canonicalNested(c.Domains[i].Descriptors)
	}
	return c, nil
}

// canonicalNested gives an empty list of nested descriptors ("descriptors":
// []) the form of an absent one (nil): both match nothing further, and the
// JSON form leaves an empty list out, so a configuration reads back equal.
func canonicalNested(ds []Descriptor) {
	for i := range ds {
		if len(ds[i].Descriptors) == 0 {
			ds[i].Descriptors = nil
			continue
		}
		canonicalNested(ds[i].Descriptors)
	}
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the configuration")
	}
	return nil
}

// ParseYAML reads a configuration written in YAML, with the same fields
// and forms as Parse (an envoyproxy/ratelimit file of one domain is
// accepted as it is, as long as it uses only the fields Descriptor and
// RateLimit have).
func ParseYAML(b []byte) (*Config, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return Parse(j)
}

// LoadFile reads a configuration file: YAML when its name ends in .yaml or
// .yml, JSON otherwise.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return ParseYAML(b)
	}
	return Parse(b)
}

// Validate checks c without a store: every domain named and distinct,
// every descriptor keyed, no two siblings with the same key and value,
// limits within ratelimit's bounds with valid names, unlimited limits
// without a unit or rate. Errors wrap ErrConfig and name the domain and
// descriptor path.
func (c *Config) Validate() error {
	_, err := compile(c)
	return err
}

// unitPeriods maps a unit to its period.
var unitPeriods = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// rule is a compiled RateLimit.
type rule struct {
	unlimited bool
	shadow    bool
	alg       ratelimit.Algorithm
	limit     ratelimit.Limit // normalized (defaults filled in)
	kind      string          // the algorithm's state kind
	unit      string          // lower case
	rpu       int
}

// node is a compiled Descriptor.
type node struct {
	rule *rule
	sub  level // the next level; nil when there is none
}

type wildcard struct {
	prefix string
	n      *node
}

// level is one level of a descriptor tree: the nodes by key.
type level map[string]*levelKey

// levelKey holds the descriptors of one key at one level.
type levelKey struct {
	exact map[string]*node // by value
	wild  []wildcard       // in configuration order
	any   *node            // the descriptor without a value
}

// compiled is a validated configuration.
type compiled struct {
	domains map[string]*compiledDomain
	headers Headers
	rules   []*rule
}

type compiledDomain struct {
	group string
	top   level
}

// compile validates c and builds its matching trees.
func compile(c *Config) (*compiled, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil configuration", ErrConfig)
	}
	out := &compiled{domains: map[string]*compiledDomain{}}
	if c.Headers != nil {
		out.headers = *c.Headers
	}
	h := &out.headers
	if h.Limit == "" {
		h.Limit = DefaultLimitHeader
	}
	if h.Remaining == "" {
		h.Remaining = DefaultRemainingHeader
	}
	if h.Reset == "" {
		h.Reset = DefaultResetHeader
	}
	for _, n := range []string{h.Limit, h.Remaining, h.Reset} {
		if !validHeaderName(n) {
			return nil, fmt.Errorf("%w: response_headers: %q is not a valid header name", ErrConfig, n)
		}
	}
	for i, d := range c.Domains {
		if d.Domain == "" {
			return nil, fmt.Errorf("%w: domains[%d]: empty domain", ErrConfig, i)
		}
		if out.domains[d.Domain] != nil {
			return nil, fmt.Errorf("%w: domain %q configured twice", ErrConfig, d.Domain)
		}
		cd := &compiledDomain{group: groupName(d.Domain)}
		top, err := compileLevel(out, d.Domain, nil, d.Descriptors)
		if err != nil {
			return nil, err
		}
		cd.top = top
		out.domains[d.Domain] = cd
	}
	return out, nil
}

// compileLevel compiles the descriptors under path (key=value pairs).
func compileLevel(out *compiled, domain string, path []string, ds []Descriptor) (level, error) {
	if len(path)/2 >= MaxDepth && len(ds) > 0 {
		return nil, fmt.Errorf("%w: domain %q: descriptors nested deeper than %d", ErrConfig, domain, MaxDepth)
	}
	lv := level{}
	for i, d := range ds {
		where := fmt.Sprintf("domain %q, descriptor %s", domain, describe(append(path[:len(path):len(path)], d.Key, d.Value)))
		if d.Key == "" {
			return nil, fmt.Errorf("%w: domain %q, descriptor %s: descriptors[%d] has no key", ErrConfig, domain, describe(path), i)
		}
		lk := lv[d.Key]
		if lk == nil {
			lk = &levelKey{exact: map[string]*node{}}
			lv[d.Key] = lk
		}
		n := &node{}
		switch {
		case d.Value == "":
			if lk.any != nil {
				return nil, fmt.Errorf("%w: %s configured twice", ErrConfig, where)
			}
			lk.any = n
		case strings.HasSuffix(d.Value, "*"):
			p := strings.TrimSuffix(d.Value, "*")
			for _, w := range lk.wild {
				if w.prefix == p {
					return nil, fmt.Errorf("%w: %s configured twice", ErrConfig, where)
				}
			}
			lk.wild = append(lk.wild, wildcard{p, n})
		default:
			if lk.exact[d.Value] != nil {
				return nil, fmt.Errorf("%w: %s configured twice", ErrConfig, where)
			}
			lk.exact[d.Value] = n
		}
		sub := append(path[:len(path):len(path)], d.Key, d.Value)
		if d.RateLimit != nil {
			r, err := compileRule(domain, sub, d.RateLimit, d.ShadowMode)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
			}
			n.rule = r
			out.rules = append(out.rules, r)
		}
		if len(d.Descriptors) > 0 {
			child, err := compileLevel(out, domain, sub, d.Descriptors)
			if err != nil {
				return nil, err
			}
			n.sub = child
		}
	}
	return lv, nil
}

// compileRule validates one rate_limit.
func compileRule(domain string, path []string, rl *RateLimit, shadow bool) (*rule, error) {
	unit := strings.ToLower(rl.Unit)
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != 0 || rl.Algorithm != "" || rl.Burst != 0 {
			return nil, errors.New("an unlimited rate_limit takes no unit, requests_per_unit, algorithm or burst")
		}
		return &rule{unlimited: true, shadow: shadow, limit: ratelimit.Limit{Name: rl.Name}}, nil
	}
	period, ok := unitPeriods[unit]
	if !ok {
		return nil, fmt.Errorf("unit %q: want second, minute, hour, day, week, month or year", rl.Unit)
	}
	if rl.RequestsPerUnit < 1 || rl.RequestsPerUnit > ratelimit.MaxRate {
		return nil, fmt.Errorf("requests_per_unit %d out of range [1, %d]", rl.RequestsPerUnit, ratelimit.MaxRate)
	}
	alg := ratelimit.GCRA
	if rl.Algorithm != "" {
		if err := alg.UnmarshalText([]byte(rl.Algorithm)); err != nil {
			return nil, fmt.Errorf("algorithm %q: want gcra, fixed-window, sliding-window or sliding-log", rl.Algorithm)
		}
	}
	r := &rule{shadow: shadow, alg: alg, unit: unit, rpu: rl.RequestsPerUnit,
		limit: ratelimit.Limit{Name: rl.Name, Rate: rl.RequestsPerUnit, Period: period, Burst: rl.Burst}}
	if r.limit.Name == "" {
		r.limit.Name = ruleName(domain, path, r)
	}
	// New validates the limit (its name included) against ratelimit's
	// rules; the store given here is never used.
	lim, err := ratelimit.New(nopStore{}, alg, r.limit, nil)
	if err != nil {
		return nil, err
	}
	r.limit = lim.Limit()
	sk, err := lim.StateKey("k")
	if err != nil {
		return nil, err
	}
	r.kind = sk.Kind
	return r, nil
}

// ruleName derives a stable, valid limit name from the descriptor path and
// the limit's parameters: the last key (its name-safe bytes, at most 40)
// and 12 hex digits of a SHA-256 over domain, path and parameters.
func ruleName(domain string, path []string, r *rule) string {
	h := sha256.New()
	parts := append([]string{domain}, path...)
	parts = append(parts, r.alg.String(), strconv.Itoa(r.limit.Rate), r.limit.Period.String(), strconv.Itoa(r.limit.Burst))
	h.Write([]byte(joinEscaped(parts)))
	key := path[len(path)-2]
	var b strings.Builder
	for i := 0; i < len(key) && b.Len() < 40; i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + "-" + hex.EncodeToString(h.Sum(nil)[:6])
}

// groupName is the ratelimit group a domain's state is kept under:
// "rls." and the domain when it is made of name-safe bytes (at most 56),
// else "rls-" and 24 hex digits of its SHA-256. The two forms cannot meet.
func groupName(domain string) string {
	safe := len(domain) <= ratelimit.MaxNameLen-8
	for i := 0; i < len(domain) && safe; i++ {
		c := domain[i]
		safe = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if safe {
		return "rls." + domain
	}
	sum := sha256.Sum256([]byte(domain))
	return "rls-" + hex.EncodeToString(sum[:12])
}

// describe renders a descriptor path for error messages.
func describe(path []string) string {
	if len(path) == 0 {
		return "(top level)"
	}
	var b strings.Builder
	for i := 0; i+1 < len(path); i += 2 {
		if i > 0 {
			b.WriteString(" > ")
		}
		b.WriteString(strconv.Quote(path[i]))
		if path[i+1] != "" {
			b.WriteString("=" + strconv.Quote(path[i+1]))
		}
	}
	return b.String()
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false // lower-case tokens only: Envoy and HTTP/2 want them
		}
	}
	return true
}
