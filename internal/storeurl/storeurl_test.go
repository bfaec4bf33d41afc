package storeurl

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in       string
		kind     Kind
		redacted string
	}{
		{"", Embedded, "embedded"},
		{"memory", Memory, "memory"},
		{"sqlite:/tmp/x.db", SQLite, "sqlite:/tmp/x.db"},
		{"sqlite:///tmp/x.db", SQLite, "sqlite:/tmp/x.db"},
		{"redis://127.0.0.1:6379/0", Redis, "redis://127.0.0.1:6379/0"},
		{"rediss://u:hunter2@h:6380", Redis, "rediss://u:xxxxx@h:6380"},
		{"postgres://app:hunter2@db:5432/app?sslmode=disable", Postgres, "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgresql://db/app", Postgres, "postgresql://db/app"},
		{"etcd://127.0.0.1:2379,127.0.0.1:2380/", Etcd, "etcd://127.0.0.1:2379,127.0.0.1:2380"},
		{"etcd://[::1]:2379", Etcd, "etcd://[::1]:2379"},
	} {
		s, err := Parse(c.in)
		if err != nil || s.Kind != c.kind || s.Redacted() != c.redacted {
			t.Errorf("Parse(%q) = %v %q, %v; want %v %q", c.in, s.Kind, s.Redacted(), err, c.kind, c.redacted)
		}
	}
	s, _ := Parse("etcd://a:1,b:2")
	if strings.Join(s.Endpoints, " ") != "http://a:1 http://b:2" {
		t.Fatalf("endpoints = %v", s.Endpoints)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, in := range []string{
		"mysql://root:hunter2@db/x",
		"memory2",
		"sqlite",
		"redis",
		"sqlite:",
		"redis://",
		"redis://:hunter2@h:99999",
		"postgres://u:hunter2%zz@h/db",
		"postgres://u:hunter2@h:port/db",
		"etcd://",
		"etcd://hostonly",
		"etcd://h:0",
		"etcd:h:1",
		"redis://h\x00:1",
		strings.Repeat("a", MaxLen+1),
		"\xff",
	} {
		_, err := Parse(in)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", in, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q): error reveals the password: %v", in, err)
		}
	}
}

// FuzzParse checks that Parse never panics, that a password never reaches
// an error or the redacted form, and that what parses is printable.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"", "memory", "sqlite:/tmp/a.db", "redis://h:6379", "rediss://u:p@h:1/2",
		"postgres://u:p@h:5432/d?sslmode=disable", "etcd://a:1,b:2", "etcd://[::1]:2379", "mysql://x", "redis://h:%zz"} {
		f.Add(seed, "pw-Secret-42")
	}
	f.Fuzz(func(t *testing.T, spec, password string) {
		check := func(in, secret string) {
			s, err := Parse(in)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q): error %v does not wrap ErrInvalid", in, err)
				}
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Fatalf("Parse(%q): error reveals the password: %v", in, err)
				}
				return
			}
			if !utf8.ValidString(s.Redacted()) {
				t.Fatalf("Parse(%q): redacted form is not UTF-8", in)
			}
			if secret != "" && strings.Contains(s.Redacted(), secret) {
				t.Fatalf("Parse(%q): redacted form %q reveals the password", in, s.Redacted())
			}
			switch s.Kind {
			case Etcd:
				if len(s.Endpoints) == 0 {
					t.Fatalf("Parse(%q): etcd without endpoints", in)
				}
			case Redis, Postgres:
				if s.URL != in {
					t.Fatalf("Parse(%q): URL %q is not the input", in, s.URL)
				}
			}
		}
		check(spec, "")
		// The same text with a distinctive password in its userinfo.
		if strings.ContainsAny(password, "@/?#:%[]") {
			return
		}
		password = "S3cr" + password + "t9Q" // distinctive: no fixed word of a message contains it
		for _, scheme := range []string{"redis", "rediss", "postgres", "postgresql", "etcd", "mysql"} {
			host := strings.TrimPrefix(spec, scheme+"://")
			if strings.Contains(host, password) {
				continue // the text shows it as a host, not as a password
			}
			check(scheme+"://user:"+password+"@"+host, password)
		}
	})
}
