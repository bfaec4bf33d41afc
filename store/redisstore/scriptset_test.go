package redisstore

import (
	"io/fs"
	"regexp"
	"testing"
	"testing/fstest"
)

// TestScriptSet: ScriptSet is 12 hex digits, the same on every call and
// over a copy of the embedded scripts, and changes when a script's body
// changes, when one is added or removed, and when one is renamed.
func TestScriptSet(t *testing.T) {
	id := ScriptSet()
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("ScriptSet() = %q, want 12 hex digits", id)
	}
	if again := ScriptSet(); again != id {
		t.Fatalf("ScriptSet() = %q, then %q", id, again)
	}

	// A copy of the embedded scripts hashes the same.
	orig := fstest.MapFS{}
	ents, err := fs.ReadDir(luaFiles, "lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := fs.ReadFile(luaFiles, "lua/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		orig["lua/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	if len(orig) == 0 {
		t.Fatal("no embedded scripts")
	}
	if got, err := scriptSet(orig, "lua"); err != nil || got != id {
		t.Fatalf("over a copy: %q, %v; want %q", got, err, id)
	}

	// clone returns a copy of orig with edit applied.
	clone := func(edit func(fstest.MapFS)) fstest.MapFS {
		c := fstest.MapFS{}
		for k, v := range orig {
			c[k] = &fstest.MapFile{Data: append([]byte(nil), v.Data...)}
		}
		edit(c)
		return c
	}
	cases := map[string]fstest.MapFS{
		"a body changed": clone(func(c fstest.MapFS) {
			f := c["lua/acquire.lua"]
			f.Data = append(f.Data, "\n-- changed\n"...)
		}),
		"a script added": clone(func(c fstest.MapFS) {
			c["lua/zz_new.lua"] = &fstest.MapFile{Data: []byte("return 1\n")}
		}),
		"a script removed": clone(func(c fstest.MapFS) { delete(c, "lua/release.lua") }),
		"a script renamed": clone(func(c fstest.MapFS) {
			c["lua/release2.lua"] = c["lua/release.lua"]
			delete(c, "lua/release.lua")
		}),
	}
	for name, fsys := range cases {
		got, err := scriptSet(fsys, "lua")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got == id {
			t.Errorf("%s: ScriptSet still %q", name, got)
		}
	}
	// Files other than scripts do not count.
	if got, _ := scriptSet(clone(func(c fstest.MapFS) { c["lua/README"] = &fstest.MapFile{Data: []byte("x")} }), "lua"); got != id {
		t.Errorf("a non-script file changed ScriptSet: %q, want %q", got, id)
	}
}
