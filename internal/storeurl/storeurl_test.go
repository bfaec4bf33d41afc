package storeurl

import (
	"errors"
	"os"
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
			if !strings.ContainsAny(password, " \t&;'=+") {
				check(scheme+"://"+host+"?sslmode=disable&password="+password, password)
			}
		}
		if !strings.ContainsAny(password, " \t&;'=\\") {
			check("host=h user=u password="+password+" dbname=d", password)
			check("host=h sslpassword='"+password+"'", password)
		}
	})
}

// TestParseSecrets: passwords in query parameters and in key=value
// strings are masked in the redacted form and in errors.
func TestParseSecrets(t *testing.T) {
	for _, c := range []struct {
		in       string
		kind     Kind
		redacted string
	}{
		{"postgres://db/app?password=hunter2&sslmode=disable", Postgres, "postgres://db/app?password=xxxxx&sslmode=disable"},
		{"postgres://u@db/app?sslpassword=hunter2", Postgres, "postgres://u@db/app?sslpassword=xxxxx"},
		{"postgresql://db/app?PassWord=hunter2", Postgres, "postgresql://db/app?PassWord=xxxxx"},
		{"redis://h:6379/0?password=hunter2", Redis, "redis://h:6379/0?password=xxxxx"},
		{"host=db user=app password=hunter2 dbname=app", Postgres, "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='hun ter\\'2' sslmode=disable", Postgres, "host=db password=xxxxx sslmode=disable"},
		{"dbname=app sslpassword=hunter2", Postgres, "dbname=app sslpassword=xxxxx"},
	} {
		s, err := Parse(c.in)
		if err != nil || s.Kind != c.kind || s.Redacted() != c.redacted || s.String() != c.redacted {
			t.Errorf("Parse(%q) = %v %q, %v; want %v %q", c.in, s.Kind, s.Redacted(), err, c.kind, c.redacted)
		}
		if s.URL != c.in {
			t.Errorf("Parse(%q).URL = %q, want the input", c.in, s.URL)
		}
	}
	for _, in := range []string{"mysql://db?password=hunter2", "x host=db password=hunter2", "Host=db password=hunter2"} {
		_, err := Parse(in)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q) = %v, want an error without the password", in, err)
		}
	}
	if got := Redact("postgres://u:hunter2@db/app?sslpassword=hunter2"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact = %q", got)
	}
	if got := Redact("host=db password=hunter2"); got != "host=db password=xxxxx" {
		t.Errorf("Redact = %q", got)
	}
}

// TestEnvPassword: a URL without a password takes TENURE_STORE_PASSWORD
// or the first line of TENURE_STORE_PASSWORD_FILE; one with a password
// keeps its own; the password never shows in the redacted form.
func TestEnvPassword(t *testing.T) {
	t.Setenv(PasswordEnv, "hunter2 &'x")
	for _, c := range []struct{ in, url string }{
		{"redis://h:6379/0", "redis://default:hunter2%20&%27x@h:6379/0"},
		{"rediss://app@h:6380", "rediss://app:hunter2%20&%27x@h:6380"},
		{"postgres://app@db/app", "postgres://app:hunter2%20&%27x@db/app"},
		{"postgres://db/app?sslmode=disable", "postgres://db/app?password=hunter2+%26%27x&sslmode=disable"},
		{"postgres://app:own@db/app", "postgres://app:own@db/app"},
		{"host=db dbname=app", `host=db dbname=app password='hunter2 &\'x'`},
		{"host=db password=own", "host=db password=own"},
		{"etcd://h:1", ""},
		{"sqlite:/tmp/x.db", ""},
	} {
		s, err := Parse(c.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.in, err)
		}
		if s.URL != c.url {
			t.Errorf("Parse(%q).URL = %q, want %q", c.in, s.URL, c.url)
		}
		if strings.Contains(s.Redacted(), "hunter2") {
			t.Errorf("Parse(%q).Redacted() = %q reveals the password", c.in, s.Redacted())
		}
	}
	t.Setenv(PasswordEnv, "")
	f := t.TempDir() + "/pw"
	if err := os.WriteFile(f, []byte("from-file\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PasswordFileEnv, f)
	if s, err := Parse("redis://h:1"); err != nil || s.URL != "redis://default:from-file@h:1" {
		t.Errorf("with a password file: %q, %v", s.URL, err)
	}
	for _, bad := range []string{f + ".missing", t.TempDir()} {
		t.Setenv(PasswordFileEnv, bad)
		if _, err := Parse("redis://h:1"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), PasswordFileEnv) {
			t.Errorf("password file %s: %v, want an error naming %s", bad, err, PasswordFileEnv)
		}
	}
	if err := os.WriteFile(f, []byte("\nx"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PasswordFileEnv, f)
	if _, err := Parse("postgres://db/app"); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty first line: %v, want ErrInvalid", err)
	}
	if s, err := Parse("memory"); err != nil || s.Kind != Memory {
		t.Errorf("memory with a bad password file: %v", err)
	}
}
