// Package storeurl parses the --store values that tenure's commands take:
//
//	""                        the embedded default (a SQLite file, and memory)
//	memory                    the in-process store
//	sqlite:PATH               a SQLite file (sqlite://PATH is accepted too)
//	redis://HOST:PORT/…       Redis or Redis Cluster (rediss:// for TLS)
//	postgres://…              PostgreSQL (postgresql:// too)
//	etcd://HOST:PORT[,…]      etcd, one or more endpoints
//
// A parse error never contains the password of a URL, and [Spec.Redacted]
// is the form to print.
package storeurl

import (
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalid reports a --store value that names no store tenure knows.
var ErrInvalid = kind.New("store: invalid store URL", tenure.ErrInvalid)

// Kind is the kind of store a Spec names.
type Kind string

// The kinds of store.
const (
	Embedded Kind = "embedded"
	Memory   Kind = "memory"
	SQLite   Kind = "sqlite"
	Redis    Kind = "redis"
	Postgres Kind = "postgres"
	Etcd     Kind = "etcd"
)

// MaxLen is the longest --store value accepted, in bytes.
const MaxLen = 4096

// Spec is a parsed --store value.
type Spec struct {
	Kind Kind
	// Path is the SQLite file (empty: a new file in a temporary directory).
	Path string
	// URL is the Redis or PostgreSQL URL as given, password included: pass
	// it to the client, never print it.
	URL string
	// Endpoints are etcd's endpoints as http://HOST:PORT.
	Endpoints []string

	redacted string
}

// Redacted returns the value without any password, for messages and logs.
func (s Spec) Redacted() string { return s.redacted }

// String returns Redacted.
func (s Spec) String() string { return s.redacted }

// Parse parses a --store value. Errors wrap ErrInvalid and never contain a
// password.
func Parse(spec string) (Spec, error) {
	if len(spec) > MaxLen {
		return Spec{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLen)
	}
	if !utf8.ValidString(spec) || strings.ContainsFunc(spec, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return Spec{}, fmt.Errorf("%w: not printable UTF-8", ErrInvalid)
	}
	scheme, _, found := strings.Cut(spec, ":")
	if !found {
		scheme = ""
	}
	switch {
	case spec == "":
		return Spec{Kind: Embedded, redacted: "embedded"}, nil
	case spec == "memory":
		return Spec{Kind: Memory, redacted: "memory"}, nil
	case scheme == "sqlite":
		path := strings.TrimPrefix(strings.TrimPrefix(spec, "sqlite:"), "//")
		if path == "" {
			return Spec{}, fmt.Errorf("%w: sqlite: needs a file path (sqlite:PATH)", ErrInvalid)
		}
		return Spec{Kind: SQLite, Path: path, redacted: "sqlite:" + path}, nil
	case scheme == "redis" || scheme == "rediss":
		return parseURL(Redis, spec)
	case scheme == "postgres" || scheme == "postgresql":
		return parseURL(Postgres, spec)
	case scheme == "etcd":
		return parseEtcd(spec)
	}
	return Spec{}, fmt.Errorf("%w: %q: want memory, sqlite:PATH, redis://…, postgres://… or etcd://…", ErrInvalid, redactedPrefix(spec))
}

// parseURL checks a Redis or PostgreSQL URL: it must have a host.
func parseURL(k Kind, spec string) (Spec, error) {
	u, err := url.Parse(spec)
	if err != nil {
		// url.Error repeats the whole URL; say what is wrong without it.
		return Spec{}, fmt.Errorf("%w: %s URL does not parse: %s", ErrInvalid, k, cause(err))
	}
	if u.Host == "" && u.Query().Get("host") == "" {
		return Spec{}, fmt.Errorf("%w: %s URL %s has no host", ErrInvalid, k, u.Redacted())
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return Spec{}, fmt.Errorf("%w: %s URL %s has port out of range", ErrInvalid, k, u.Redacted())
		}
	}
	return Spec{Kind: k, URL: spec, redacted: u.Redacted()}, nil
}

// parseEtcd reads etcd://HOST:PORT[,HOST:PORT…].
func parseEtcd(spec string) (Spec, error) {
	rest, ok := strings.CutPrefix(spec, "etcd://")
	if !ok {
		return Spec{}, fmt.Errorf("%w: etcd URLs are etcd://HOST:PORT[,HOST:PORT…]", ErrInvalid)
	}
	s := Spec{Kind: Etcd}
	for hp := range strings.SplitSeq(rest, ",") {
		hp = strings.TrimSuffix(hp, "/")
		if hp == "" {
			continue
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || strings.ContainsAny(host, "/@?#") {
			return Spec{}, fmt.Errorf("%w: etcd endpoint %q is not HOST:PORT", ErrInvalid, redactedPrefix(hp))
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return Spec{}, fmt.Errorf("%w: etcd endpoint %q has port out of range", ErrInvalid, redactedPrefix(hp))
		}
		s.Endpoints = append(s.Endpoints, "http://"+net.JoinHostPort(host, port))
	}
	if len(s.Endpoints) == 0 {
		return Spec{}, fmt.Errorf("%w: no etcd endpoints (etcd://HOST:PORT)", ErrInvalid)
	}
	s.redacted = "etcd://" + strings.Join(trimHTTP(s.Endpoints), ",")
	return s, nil
}

func trimHTTP(eps []string) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = strings.TrimPrefix(e, "http://")
	}
	return out
}

// cause names what is wrong with a URL that does not parse, in fixed words:
// url.Parse's own messages may quote a piece of the password.
func cause(err error) string {
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return "invalid %-escape"
	case errors.As(err, &host):
		return "invalid character in host"
	case strings.Contains(err.Error(), "userinfo"):
		return "invalid user or password"
	case strings.Contains(err.Error(), "port"):
		return "invalid port"
	}
	return "malformed URL"
}

// redactedPrefix returns what can be shown of an unknown value: the part
// before any "@" (which may follow a password), at most 64 bytes.
func redactedPrefix(spec string) string {
	if i := strings.IndexByte(spec, '@'); i >= 0 {
		if j := strings.Index(spec, "://"); j >= 0 && j < i {
			spec = spec[:j+3] + "…@" + spec[i+1:]
		} else {
			spec = "…@" + spec[i+1:]
		}
	}
	if len(spec) > 64 {
		spec = spec[:64] + "…"
	}
	return strings.ToValidUTF8(spec, "")
}
