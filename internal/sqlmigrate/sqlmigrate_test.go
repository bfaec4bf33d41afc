package sqlmigrate

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	ok := fstest.MapFS{
		"0002_b.up.sql":   {Data: []byte("two {{x}}")},
		"0002_b.down.sql": {Data: []byte("-- tenure:guard rows of b\n-- tenure:guard-sql SELECT count(*) FROM {{x}}.b\nundo two")},
		"0001_a.up.sql":   {Data: []byte("one")},
		"0001_a.down.sql": {Data: []byte("undo one")},
		"README.md":       {Data: []byte("not a migration")},
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
	if d := DownFS(ms, "{{x}}", `"s"`).(fstest.MapFS)["0001_a.down.sql"]; d == nil || string(d.Data) != "undo one" {
		t.Fatalf("down file in DownFS: %v", d)
	}
	if _, ok := FS(ms, "{{x}}", `"s"`).(fstest.MapFS)["0001_a.down.sql"]; ok {
		t.Fatal("FS has a down file: goose would read two files of version 1")
	}
	// Comments and spacing do not change a checksum; a statement does.
	c := ms[0]
	c2 := c
	c2.SQL = "-- a comment\n  " + c.SQL + "  \n\n"
	c3 := c
	c3.SQL = c.SQL + " x"
	if Checksum(c) != Checksum(c2) || Checksum(c) == Checksum(c3) {
		t.Fatalf("checksums %s %s %s", Checksum(c), Checksum(c2), Checksum(c3))
	}
	if len(ms[0].Guards) != 0 || len(ms[1].Guards) != 1 || ms[1].Guards[0].What != "rows of b" ||
		ms[1].Guards[0].SQL != "SELECT count(*) FROM {{x}}.b" {
		t.Fatalf("guards %+v %+v", ms[0].Guards, ms[1].Guards)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":           {"0001_a.up.sql": {}, "0001_a.down.sql": {}, "0003_c.up.sql": {}, "0003_c.down.sql": {}},
		"bad name":      {"one.up.sql": {}},
		"no name":       {"0001_.up.sql": {}, "0001_.down.sql": {}},
		"no down":       {"0001_a.up.sql": {}},
		"no up":         {"0001_a.up.sql": {}, "0001_a.down.sql": {}, "0002_b.down.sql": {}},
		"guard, no sql": {"0001_a.up.sql": {}, "0001_a.down.sql": {Data: []byte("-- tenure:guard x\nDROP TABLE t;")}},
		"sql, no guard": {"0001_a.up.sql": {}, "0001_a.down.sql": {Data: []byte("-- tenure:guard-sql SELECT 1")}},
	} {
		if _, err := Load(fsys); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
}

func TestCheckNamesBothVersions(t *testing.T) {
	for _, cur := range []int{2, 2 + Window} {
		if err := Check("s", "x", cur, 2); err != nil || !Compatible(cur, 2) {
			t.Fatalf("Check(%d, 2) = %v", cur, err)
		}
	}
	if Compatible(1, 2) || Compatible(3+Window, 2) {
		t.Fatal("Compatible outside the window")
	}
	for _, c := range [][2]int{{0, 2}, {1, 2}, {5, 2}} {
		err := Check("s", "x", c[0], c[1])
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "version "+string(rune('0'+c[0]))) ||
			!strings.Contains(err.Error(), "version "+string(rune('0'+c[1]))) {
			t.Fatalf("Check(%d, %d) = %v", c[0], c[1], err)
		}
	}
}

func TestDownPlan(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 2}, {Version: 3}}
	p, err := DownPlan(ms, 3, 1)
	if err != nil || len(p) != 2 || p[0].Version != 3 || p[1].Version != 2 {
		t.Fatalf("DownPlan(3, 1) = %+v, %v", p, err)
	}
	if p, err := DownPlan(ms, 2, 2); err != nil || len(p) != 0 {
		t.Fatalf("DownPlan(2, 2) = %+v, %v", p, err)
	}
	for _, c := range [][2]int{{2, 3}, {2, -1}} {
		if _, err := DownPlan(ms, c[0], c[1]); err == nil {
			t.Errorf("DownPlan(%d, %d) accepted", c[0], c[1])
		}
	}
	if _, err := DownPlan(ms, 4, 3); !errors.Is(err, ErrVersion) {
		t.Errorf("DownPlan from an unknown version = %v, want ErrVersion", err)
	}
}

func TestRefusalNamesWhatIsLost(t *testing.T) {
	err := error(&Refusal{Store: "st", Lost: []Loss{{Version: 5, What: "fences", Rows: 3}, {Version: 1, What: "ledger rows", Rows: 2}}})
	if !errors.Is(err, ErrDownRefused) {
		t.Fatal("Refusal does not wrap ErrDownRefused")
	}
	for _, want := range []string{"version 5 would drop 3 fences", "version 1 would drop 2 ledger rows"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

func TestContracting(t *testing.T) {
	for _, sql := range []string{
		"DROP TABLE x;", "ALTER TABLE t DROP COLUMN c;", "alter table t rename to u;",
		"ALTER TABLE t ALTER COLUMN c TYPE bigint;", "ALTER TABLE t ALTER COLUMN c SET NOT NULL;",
		"DELETE FROM t;", "TRUNCATE t;", "DROP INDEX i;",
		"ALTER TABLE t ADD COLUMN c text NOT NULL;", "ALTER TABLE IF EXISTS t DROP CONSTRAINT k;", "ALTER TABLE ONLY t DROP COLUMN c;",
		"ALTER TABLE t ADD CONSTRAINT k CHECK (a > 0);", "CREATE UNIQUE INDEX i ON t (a);", "ALTER TABLE t ALTER COLUMN c DROP DEFAULT;",
	} {
		if len(Contracting(sql)) == 0 {
			t.Errorf("Contracting(%q) found nothing", sql)
		}
	}
	for _, sql := range []string{
		"ALTER TABLE t ADD COLUMN IF NOT EXISTS c text;\n-- DROP TABLE x is not run\nCREATE INDEX IF NOT EXISTS i ON t (c);",
		"CREATE TABLE IF NOT EXISTS u (a int); INSERT INTO m VALUES (1) ON CONFLICT DO NOTHING;",
		"ALTER TABLE t ADD COLUMN c bigint NOT NULL DEFAULT 0;",
	} {
		if got := Contracting(sql); len(got) != 0 {
			t.Errorf("Contracting(%q) = %q", sql, got)
		}
	}
}
