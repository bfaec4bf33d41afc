package sqlmigrate

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	ok := fstest.MapFS{
		"0002_b.up.sql": {Data: []byte("two {{x}}")},
		"0001_a.up.sql": {Data: []byte("one")},
		"README.md":     {Data: []byte("not a migration")},
	}
	ms, err := Load(ok)
	if err != nil || len(ms) != 2 || ms[0].Version != 1 || ms[1].Name != "b" {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	if got := Pending(ms, 1); len(got) != 1 || got[0].Version != 2 {
		t.Fatalf("Pending(1) = %+v", got)
	}
	b, _ := FS(ms, "{{x}}", `"s"`).(fstest.MapFS)["0002_b.up.sql"]
	if string(b.Data) != `two "s"` {
		t.Fatalf("resolved %q", b.Data)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":      {"0001_a.up.sql": {}, "0003_c.up.sql": {}},
		"bad name": {"one.up.sql": {}},
		"no name":  {"0001_.up.sql": {}},
	} {
		if _, err := Load(fsys); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
}

func TestCheckNamesBothVersions(t *testing.T) {
	if err := Check("s", "x", 2, 2); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]int{{0, 2}, {1, 2}, {5, 2}} {
		err := Check("s", "x", c[0], c[1])
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "version "+string(rune('0'+c[0]))) ||
			!strings.Contains(err.Error(), "version "+string(rune('0'+c[1]))) {
			t.Fatalf("Check(%d, %d) = %v", c[0], c[1], err)
		}
	}
}
