package server

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	ratelimitdriver "github.com/tenurekit/tenure/ratelimit/driver"
)

// ErrConfig reports a configuration that cannot be used. The message names
// the field, never a token.
var ErrConfig = errors.New("server: invalid configuration")

// MinTokenLen is the shortest bearer token a configuration accepts.
const MinTokenLen = 16

// Defaults of Config.
const (
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxWait           = 30 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	// DefaultRate and DefaultPeriod are the API's own limit per token.
	DefaultRate   = 1000
	DefaultPeriod = time.Second
	// DefaultMaxStreams and DefaultMaxWaits bound the long-lived requests
	// of one token at a time: dashboard event streams and waiting lease
	// acquires.
	DefaultMaxStreams = 4
	DefaultMaxWaits   = 16
)

// ReadOps are the operations the "read" alias in Token.Operations allows:
// the GET operations (inspectLease, listLeases, fencedRead,
// inspectIdempotency, listSessions, readSessionValue, slotHistory), which
// change nothing.
var ReadOps = readOps()

// Config is what tenure serve reads from its --config file (JSON). The
// zero value of every field means its default.
type Config struct {
	// Tokens are the bearer tokens the API accepts. Without any, every API
	// request is refused with 401.
	Tokens []Token
	// MaxBodyBytes bounds a request body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxWait bounds an acquire's long poll. Default DefaultMaxWait.
	MaxWait time.Duration
	// Rate and Period are the API's own rate limit per token (GCRA, with
	// Burst). Default DefaultRate per DefaultPeriod; Rate < 0 turns it off.
	Rate   int
	Period time.Duration
	Burst  int
	// MaxStreams is the most dashboard event streams one token may hold
	// open at once, MaxWaits the most acquires that wait for a held key.
	// A request past either gets rate_limited. Defaults DefaultMaxStreams
	// and DefaultMaxWaits; at most 1000.
	MaxStreams, MaxWaits int
	// Timeouts of the HTTP server's phases. Defaults:
	// DefaultReadHeaderTimeout, DefaultReadTimeout, MaxWait + 30s for
	// WriteTimeout (a long poll must be able to answer), DefaultIdleTimeout.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Limits describe the rate limits the services that use this server
	// define, so that the dashboard's Rate limits panel offers them: an
	// operator picks one and types a key, instead of entering its rate,
	// period, burst and algorithm by hand. They change nothing the API
	// allows or refuses. At most MaxConfigLimits.
	Limits []LimitInfo
}

// MaxConfigLimits is the most limits Config.Limits may describe.
const MaxConfigLimits = 100

// LimitInfo describes a rate limit a service defines (Config.Limits).
type LimitInfo struct {
	// Name is the limit's name, as the service gives it (ratelimit.Limit
	// Name): the state of a key is kept under it. Required, unique.
	Name string
	// Algorithm is gcra (the default), fixed-window, sliding-window or
	// sliding-log.
	Algorithm string
	// Rate per Period, with Burst (default Rate), as ratelimit.Limit.
	Rate   int
	Period time.Duration
	Burst  int
	// Description says what the limit is for, for people (at most 200
	// bytes).
	Description string
}

// Token is one bearer token and what it may do.
type Token struct {
	// Name identifies the token in logs and metrics (never the token).
	Name string
	// Secret is the bearer token itself (at least MinTokenLen bytes).
	Secret secret.Text
	// Prefixes are the namespaces the token may touch: lease keys, fenced
	// names, idempotency scopes, rate limit keys, session user IDs, job
	// names. A namespace is a path segment (see InNamespace): "billing"
	// or "billing/" holds "billing/42" but not "billing-internal/42". [""]
	// allows every key. Required.
	Prefixes []string
	// Operations are the operation IDs the token may call; "*" allows all,
	// "read" the read-only ones (ReadOps). Required.
	Operations []string
}

// configFile is the JSON form of a Config.
type configFile struct {
	Tokens []struct {
		Name       string   `json:"name"`
		Token      string   `json:"token"`
		TokenFile  string   `json:"token_file"`
		Prefixes   []string `json:"prefixes"`
		Operations []string `json:"operations"`
	} `json:"tokens"`
	MaxBodyBytes int64             `json:"max_body_bytes"`
	MaxWait      serveapi.Duration `json:"max_wait"`
	MaxStreams   int               `json:"max_streams"`
	MaxWaits     int               `json:"max_waits"`
	RateLimit    *struct {
		Rate   int               `json:"rate"`
		Period serveapi.Duration `json:"period"`
		Burst  int               `json:"burst"`
	} `json:"rate_limit"`
	Limits []struct {
		Name        string            `json:"name"`
		Algorithm   string            `json:"algorithm"`
		Rate        int               `json:"rate"`
		Period      serveapi.Duration `json:"period"`
		Burst       int               `json:"burst"`
		Description string            `json:"description"`
	} `json:"limits"`
	Timeouts struct {
		ReadHeader serveapi.Duration `json:"read_header"`
		Read       serveapi.Duration `json:"read"`
		Write      serveapi.Duration `json:"write"`
		Idle       serveapi.Duration `json:"idle"`
	} `json:"timeouts"`
}

// LoadConfig reads a configuration file (JSON; see docs/serve.md). A
// token_file entry is read relative to the file's directory. Errors wrap
// ErrConfig and never contain a token.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return ParseConfig(b, filepath.Dir(path))
}

// ParseConfig parses a configuration (the form LoadConfig reads); dir is
// where relative token files are looked up.
func ParseConfig(b []byte, dir string) (*Config, error) {
	var f configFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c := &Config{
		MaxBodyBytes:      f.MaxBodyBytes,
		MaxWait:           f.MaxWait.D(),
		MaxStreams:        f.MaxStreams,
		MaxWaits:          f.MaxWaits,
		ReadHeaderTimeout: f.Timeouts.ReadHeader.D(),
		ReadTimeout:       f.Timeouts.Read.D(),
		WriteTimeout:      f.Timeouts.Write.D(),
		IdleTimeout:       f.Timeouts.Idle.D(),
	}
	if f.RateLimit != nil {
		c.Rate, c.Period, c.Burst = f.RateLimit.Rate, f.RateLimit.Period.D(), f.RateLimit.Burst
		if c.Rate == 0 {
			c.Rate = -1
		}
	}
	for _, l := range f.Limits {
		c.Limits = append(c.Limits, LimitInfo{Name: l.Name, Algorithm: l.Algorithm, Rate: l.Rate, Period: l.Period.D(), Burst: l.Burst, Description: l.Description})
	}
	for i, t := range f.Tokens {
		tok := t.Token
		if t.TokenFile != "" {
			if tok != "" {
				return nil, fmt.Errorf("%w: tokens[%d] (%s): give token or token_file, not both", ErrConfig, i, t.Name)
			}
			p := t.TokenFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("%w: tokens[%d] (%s): token_file: %v", ErrConfig, i, t.Name, err)
			}
			tok = strings.TrimSpace(string(raw))
		}
		c.Tokens = append(c.Tokens, Token{Name: t.Name, Secret: secret.New(tok), Prefixes: t.Prefixes, Operations: t.Operations})
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks c and fills its defaults.
func (c *Config) validate() error {
	orDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&c.MaxWait, DefaultMaxWait)
	orDefault(&c.Rate, DefaultRate)
	orDefault(&c.Period, DefaultPeriod)
	orDefault(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	orDefault(&c.ReadTimeout, DefaultReadTimeout)
	orDefault(&c.WriteTimeout, c.MaxWait+30*time.Second)
	orDefault(&c.IdleTimeout, DefaultIdleTimeout)
	orDefault(&c.MaxStreams, DefaultMaxStreams)
	orDefault(&c.MaxWaits, DefaultMaxWaits)
	switch {
	case c.MaxStreams < 1 || c.MaxStreams > 1000:
		return fmt.Errorf("%w: max_streams %d out of range [1, 1000]", ErrConfig, c.MaxStreams)
	case c.MaxWaits < 1 || c.MaxWaits > 1000:
		return fmt.Errorf("%w: max_waits %d out of range [1, 1000]", ErrConfig, c.MaxWaits)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("%w: max_body_bytes %d below 1024", ErrConfig, c.MaxBodyBytes)
	case c.MaxWait < 0 || c.MaxWait > 10*time.Minute:
		return fmt.Errorf("%w: max_wait %v out of range [0, 10m]", ErrConfig, c.MaxWait)
	case c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	case c.WriteTimeout <= c.MaxWait:
		return fmt.Errorf("%w: timeouts.write %v must exceed max_wait %v (a long poll must be able to answer)", ErrConfig, c.WriteTimeout, c.MaxWait)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	names := map[string]bool{}
	sums := map[[32]byte]bool{}
	for i, t := range c.Tokens {
		switch {
		case t.Name == "":
			return fmt.Errorf("%w: tokens[%d] has no name", ErrConfig, i)
		case names[t.Name]:
			return fmt.Errorf("%w: token name %q used twice", ErrConfig, t.Name)
		case len(t.Secret.Reveal()) < MinTokenLen:
			return fmt.Errorf("%w: token %q is shorter than %d bytes", ErrConfig, t.Name, MinTokenLen)
		case strings.ContainsAny(t.Secret.Reveal(), " \t\r\n"):
			return fmt.Errorf("%w: token %q contains white space", ErrConfig, t.Name)
		case len(t.Prefixes) == 0:
			return fmt.Errorf("%w: token %q has no prefixes (use [\"\"] for every key)", ErrConfig, t.Name)
		case len(t.Operations) == 0:
			return fmt.Errorf("%w: token %q has no operations (use [\"*\"] for all)", ErrConfig, t.Name)
		}
		for _, op := range t.Operations {
			if op != "*" && op != "read" && !slices.Contains(OperationIDs(), op) {
				return fmt.Errorf("%w: token %q: unknown operation %q", ErrConfig, t.Name, op)
			}
		}
		sum := sha256.Sum256([]byte(t.Secret.Reveal()))
		if sums[sum] {
			return fmt.Errorf("%w: token %q repeats another token", ErrConfig, t.Name)
		}
		names[t.Name], sums[sum] = true, true
	}
	return nil
}

// validateLimits checks Config.Limits as ratelimit.New checks a limit,
// and fills their defaults (algorithm gcra, burst rate).
func (c *Config) validateLimits() error {
	if len(c.Limits) > MaxConfigLimits {
		return fmt.Errorf("%w: %d limits, at most %d", ErrConfig, len(c.Limits), MaxConfigLimits)
	}
	seen := map[string]bool{}
	c.Limits = slices.Clone(c.Limits)
	for i := range c.Limits {
		l := &c.Limits[i]
		switch {
		case l.Name == "":
			return fmt.Errorf("%w: limits[%d] has no name", ErrConfig, i)
		case seen[l.Name]:
			return fmt.Errorf("%w: limit name %q used twice", ErrConfig, l.Name)
		case len(l.Description) > 200:
			return fmt.Errorf("%w: limit %q: description longer than 200 bytes", ErrConfig, l.Name)
		}
		seen[l.Name] = true
		alg, ok := algorithms[l.Algorithm]
		if !ok {
			return fmt.Errorf("%w: limit %q: unknown algorithm %q (gcra, fixed-window, sliding-window, sliding-log)", ErrConfig, l.Name, l.Algorithm)
		}
		spec, err := ratelimitdriver.NewSpec(alg, ratelimitdriver.Limit{Name: l.Name, Rate: l.Rate, Period: l.Period, Burst: l.Burst})
		if err != nil {
			return fmt.Errorf("%w: limit %q: %v", ErrConfig, l.Name, err)
		}
		nl := spec.Limit()
		l.Algorithm, l.Burst = alg.String(), nl.Burst
	}
	return nil
}

// NewToken returns a new random bearer token (26 characters, 130 bits).
func NewToken() secret.Text { return secret.New("tnr_" + rand.Text()) }

// LoadOrCreateToken reads the token kept in path, or makes one and writes
// it there (mode 0600, its directory 0700) if the file does not exist.
// created reports whether it was made now.
func LoadOrCreateToken(path string) (tok secret.Text, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		t := strings.TrimSpace(string(b))
		if len(t) < MinTokenLen {
			return secret.Text{}, false, fmt.Errorf("%w: the token in %s is shorter than %d bytes", ErrConfig, path, MinTokenLen)
		}
		return secret.New(t), false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return secret.Text{}, false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return secret.Text{}, false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	tok = NewToken()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return secret.Text{}, false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if _, err := f.WriteString(tok.Reveal() + "\n"); err != nil {
		f.Close()
		return secret.Text{}, false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := f.Close(); err != nil {
		return secret.Text{}, false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return tok, true, nil
}

// AdminConfig returns the default configuration: one token named "admin"
// allowed every operation on every key.
func AdminConfig(tok secret.Text) *Config {
	c := &Config{Tokens: []Token{{Name: "admin", Secret: tok, Prefixes: []string{""}, Operations: []string{"*"}}}}
	return c
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
