// Package storeurl parses the --store values that tenure's commands take:
//
//	""                        the embedded default (a SQLite file, and memory)
//	memory                    the in-process store
//	sqlite:PATH               a SQLite file (sqlite://PATH is accepted too)
//	redis://HOST:PORT/…       Redis or Redis Cluster (rediss:// for TLS)
//	postgres://…              PostgreSQL (postgresql:// too)
//	etcd://HOST:PORT[,…]      etcd, one or more endpoints
//	host=… dbname=… …         PostgreSQL, as a libpq key=value string
//
// A parse error never contains the password of a URL (in its user
// information or in a query parameter such as password= or sslpassword=),
// and [Spec.Redacted] is the form to print.
//
// A Redis or PostgreSQL URL without a password takes one from the
// environment: TENURE_STORE_PASSWORD, or the first line of the file named
// by TENURE_STORE_PASSWORD_FILE (a mounted secret), so that the password
// never shows on a command line (ps) or in a unit file.
package storeurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
)

// The environment variables a password may come from.
const (
	PasswordEnv     = "TENURE_STORE_PASSWORD"
	PasswordFileEnv = "TENURE_STORE_PASSWORD_FILE"
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
	// URL is the Redis or PostgreSQL URL (or key=value string) as given,
	// password included, and with the password of TENURE_STORE_PASSWORD or
	// TENURE_STORE_PASSWORD_FILE when it had none: pass it to the client,
	// never print it.
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
	case isKeyValue(spec):
		return parseKeyValue(spec)
	}
	return Spec{}, fmt.Errorf("%w: %q: want memory, sqlite:PATH, redis://…, postgres://…, a PostgreSQL key=value string or etcd://…", ErrInvalid, redactedPrefix(spec))
}

// parseURL checks a Redis or PostgreSQL URL: it must have a host.
func parseURL(k Kind, spec string) (Spec, error) {
	u, err := url.Parse(spec)
	if err != nil {
		// url.Error repeats the whole URL; say what is wrong without it.
		return Spec{}, fmt.Errorf("%w: %s URL does not parse: %s", ErrInvalid, k, cause(err))
	}
	if u.Host == "" && u.Query().Get("host") == "" {
		return Spec{}, fmt.Errorf("%w: %s URL %s has no host", ErrInvalid, k, redactURL(u))
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return Spec{}, fmt.Errorf("%w: %s URL %s has port out of range", ErrInvalid, k, redactURL(u))
		}
	}
	pw, err := envPassword()
	if err != nil {
		return Spec{}, err
	}
	if _, has := u.User.Password(); pw != "" && !has && u.Query().Get("password") == "" {
		user := ""
		if u.User != nil {
			user = u.User.Username()
		} else if k == Redis {
			user = "default" // Redis AUTH with a password alone is the default user's
		}
		if k == Postgres && user == "" {
			// A password in the query leaves the user to the driver's
			// defaults (PGUSER, the login name).
			q := u.Query()
			q.Set("password", pw)
			u.RawQuery = q.Encode()
		} else {
			u.User = url.UserPassword(user, pw)
		}
		spec = u.String()
	}
	return Spec{Kind: k, URL: spec, redacted: redactURL(u)}, nil
}

// envPassword is the password the environment gives, if any.
func envPassword() (string, error) {
	if pw := os.Getenv(PasswordEnv); pw != "" {
		return pw, nil
	}
	f := os.Getenv(PasswordFileEnv)
	if f == "" {
		return "", nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		// The path is the operator's; the error names it, not its content.
		return "", fmt.Errorf("%w: %s: %w", ErrInvalid, PasswordFileEnv, errors.Unwrap(err))
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("%w: %s: the file %s has an empty first line", ErrInvalid, PasswordFileEnv, f)
	}
	return pw, nil
}

// secretParams are query parameters whose values are secrets, in lower
// case: PostgreSQL's password and sslpassword, and spellings other
// drivers accept.
var secretParams = map[string]bool{"password": true, "sslpassword": true, "passwd": true, "pass": true, "pwd": true, "secret": true, "token": true, "auth": true}

// redactURL is u without any password: the user information's and the
// values of secretParams, in the query or anywhere else.
func redactURL(u *url.URL) string { return maskKeyValues(u.Redacted()) }

// isKeyValue reports whether spec reads as a libpq key=value connection
// string: its first word is KEY=… with a key of letters and underscores.
func isKeyValue(spec string) bool {
	first, _, _ := strings.Cut(strings.TrimSpace(spec), " ")
	k, _, ok := strings.Cut(first, "=")
	return ok && k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") == ""
}

// parseKeyValue takes a libpq key=value string as PostgreSQL's.
func parseKeyValue(spec string) (Spec, error) {
	if !strings.Contains(" "+maskKeyValues(spec), " password=xxxxx") {
		pw, err := envPassword()
		if err != nil {
			return Spec{}, err
		}
		if pw != "" {
			spec += " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		}
	}
	return Spec{Kind: Postgres, URL: spec, redacted: maskKeyValues(spec)}, nil
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

// redactedPrefix returns what can be shown of an unknown value: the
// values of secret keys (password=…, also in a key=value DSN such as
// "host=db password=…") masked, nothing before an "@" (which may follow a
// password), at most 64 bytes.
func redactedPrefix(spec string) string {
	spec = maskKeyValues(spec)
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

// maskKeyValues masks the value of every secretParams key in s, written
// key=value (a libpq key=value string, a query), the value ending at a
// space, "&" or ";", or quoted with single quotes.
func maskKeyValues(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '=')
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		j += i
		k := j
		for k > i && !strings.ContainsRune(" \t&;?#", rune(s[k-1])) {
			k--
		}
		b.WriteString(s[i : j+1])
		end := j + 1
		if secretParams[strings.ToLower(s[k:j])] {
			if end < len(s) && s[end] == '\'' {
				end++
				for end < len(s) && s[end] != '\'' {
					if s[end] == '\\' {
						end++
					}
					end++
				}
				end++
			} else {
				for end < len(s) && !strings.ContainsRune(" \t&;", rune(s[end])) {
					end++
				}
			}
			end = min(end, len(s))
			b.WriteString("xxxxx")
		}
		i = end
	}
	return b.String()
}

// Redact returns raw (a store URL or a connection string) without any
// password, for messages and logs.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		return redactURL(u)
	}
	return redactedPrefix(raw)
}
