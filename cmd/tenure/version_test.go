package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// TestVersionCommand: tenure version prints the build, the Go version, the
// SQL stores' schema versions and windows and the Redis script set, as
// text and as one JSON object with stable member names.
func TestVersionCommand(t *testing.T) {
	want := map[string]schemaInfo{
		"postgres": {Version: pgstore.SchemaVersion, Min: pgstore.SchemaVersion, Max: pgstore.SchemaVersion + pgstore.SchemaWindow},
		"sqlite":   {Version: sqlitestore.SchemaVersion, Min: sqlitestore.SchemaVersion, Max: sqlitestore.SchemaVersion + sqlitestore.SchemaWindow},
	}

	out, err := run("version", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The member names are part of the output's contract.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not one JSON object (%v):\n%s", err, out)
	}
	for _, k := range []string{"version", "modified", "go", "schema", "redis_scripts"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q member:\n%s", k, out)
		}
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version == "" || v.Go != runtime.Version() {
		t.Errorf("version %q, go %q (want %q)", v.Version, v.Go, runtime.Version())
	}
	for name, w := range want {
		if got := v.Schema[name]; got != w {
			t.Errorf("schema %s: %+v, want %+v", name, got, w)
		}
	}
	if len(v.Schema) != len(want) {
		t.Errorf("schema %+v, want %+v", v.Schema, want)
	}
	if v.RedisScripts != redisstore.ScriptSet() || v.RedisScripts == "" {
		t.Errorf("redis_scripts %q, want %q", v.RedisScripts, redisstore.ScriptSet())
	}

	text, err := run("version")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, re := range []string{
		`(?m)^tenure +` + regexp.QuoteMeta(v.Version) + `$`,
		`(?m)^go +` + regexp.QuoteMeta(runtime.Version()) + `$`,
		`(?m)^postgres schema +` + regexp.QuoteMeta(schemaLine(want["postgres"])) + `$`,
		`(?m)^sqlite schema +` + regexp.QuoteMeta(schemaLine(want["sqlite"])) + `$`,
		`(?m)^redis scripts +` + redisstore.ScriptSet() + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("no line matching %s:\n%s", re, text)
		}
	}

	if out, err := run("version", "extra"); err == nil {
		t.Errorf("version with an argument succeeded:\n%s", out)
	}
}

// schemaLine is how tenure version prints s.
func schemaLine(s schemaInfo) string {
	if s.Min == s.Max {
		return fmt.Sprintf("%d (runs on %d)", s.Version, s.Min)
	}
	return fmt.Sprintf("%d (runs on %d to %d)", s.Version, s.Min, s.Max)
}

// TestVersionBuildInfo: the version comes from the build information: a
// released module's version as it is, a build from a checkout as "(devel)"
// with its commit and whether it had changes.
func TestVersionBuildInfo(t *testing.T) {
	schema := newVersionInfo(nil).schemaShort()
	scripts := redisstore.ScriptSet()
	cases := []struct {
		name     string
		bi       *debug.BuildInfo
		version  string
		rev      string
		modified bool
		short    string
	}{
		{"no build information", nil, "(unknown)", "", false, "tenure (unknown) (schema " + schema + ", scripts " + scripts + ")"},
		{"a released module", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/tenurekit/tenure/cmd/tenure", Version: "v0.4.0"}},
			"v0.4.0", "", false, "tenure v0.4.0 (schema " + schema + ", scripts " + scripts + ")"},
		{"a clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091"}, {Key: "vcs.modified", Value: "false"}}},
			"(devel)", "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091", false, "tenure (devel) 6df640e1a2b3 (schema " + schema + ", scripts " + scripts + ")"},
		{"a checkout with changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel)", "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091", true, "tenure (devel) 6df640e1a2b3+dirty (schema " + schema + ", scripts " + scripts + ")"},
		{"a version stamped from the checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.1-0.20260101120000-6df640e1a2b3+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091"}, {Key: "vcs.modified", Value: "true"}}},
			"v0.4.1-0.20260101120000-6df640e1a2b3+dirty", "6df640e1a2b3c4d5e6f708192a3b4c5d6e7f8091", true,
			"tenure v0.4.1-0.20260101120000-6df640e1a2b3+dirty (schema " + schema + ", scripts " + scripts + ")"},
	}
	for _, c := range cases {
		v := newVersionInfo(c.bi)
		if v.Version != c.version || v.Revision != c.rev || v.Modified != c.modified {
			t.Errorf("%s: version %q revision %q modified %v, want %q %q %v", c.name, v.Version, v.Revision, v.Modified, c.version, c.rev, c.modified)
		}
		if got := v.Short(); got != c.short {
			t.Errorf("%s: Short() = %q, want %q", c.name, got, c.short)
		}
	}
	// Differing schema versions are named per store.
	v := newVersionInfo(nil)
	v.Schema = map[string]schemaInfo{"postgres": schemaRange(6, 1), "sqlite": schemaRange(5, 1)}
	if got := v.schemaShort(); got != "postgres 6, sqlite 5" {
		t.Errorf("schemaShort() = %q", got)
	}
	if got := schemaRange(5, 1); got != (schemaInfo{Version: 5, Min: 5, Max: 6}) {
		t.Errorf("schemaRange(5, 1) = %+v", got)
	}
}
