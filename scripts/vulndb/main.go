// Command vulndb builds a Go vulnerability database that govulncheck can
// read with -db file://DIR, from the OSV files of the golang.org/x/vulndb
// module (its data/osv directory), for machines that cannot reach the
// public database; and it judges govulncheck's JSON output.
//
//	go run ./scripts/vulndb -osv $(go env GOMODCACHE)/golang.org/x/vulndb@VERSION/data/osv -out DIR
//	govulncheck -db file://DIR -format json ./... | go run ./scripts/vulndb -check
//
// With -check it exits non-zero when any module the code requires has a
// known vulnerability (called or not: the fix is to update it), and lists
// standard-library findings, which only a newer Go release fixes, without
// failing.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

type entry struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Events []map[string]string `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

type modVuln struct {
	ID       string `json:"id"`
	Modified string `json:"modified"`
	Fixed    string `json:"fixed,omitempty"`
}

type module struct {
	Path  string    `json:"path"`
	Vulns []modVuln `json:"vulns"`
}

type vuln struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
}

func main() {
	src := flag.String("osv", "", "directory of OSV JSON files (data/osv of golang.org/x/vulndb)")
	out := flag.String("out", "", "directory to write the database to")
	check := flag.Bool("check", false, "judge govulncheck -format json output read from standard input")
	flag.Parse()
	if *check {
		bad, err := judge(os.Stdin, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vulndb:", err)
			os.Exit(1)
		}
		if bad {
			os.Exit(1)
		}
		return
	}
	if *src == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "vulndb: -osv and -out are required")
		os.Exit(2)
	}
	if err := build(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func build(src, out string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no OSV files in %s", src)
	}
	if err := os.MkdirAll(filepath.Join(out, "ID"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(out, "index"), 0o755); err != nil {
		return err
	}
	mods := map[string]*module{}
	var vulns []vuln
	latest := ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || !strings.HasPrefix(e.ID, "GO-") {
			return fmt.Errorf("%s: no GO- id", f)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), b, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		latest = max(latest, e.Modified)
		for _, a := range e.Affected {
			m := mods[a.Package.Name]
			if m == nil {
				m = &module{Path: a.Package.Name}
				mods[a.Package.Name] = m
			}
			fixed := ""
			for _, r := range a.Ranges {
				for _, ev := range r.Events {
					if v := ev["fixed"]; v != "" {
						fixed = v
					}
				}
			}
			m.Vulns = append(m.Vulns, modVuln{ID: e.ID, Modified: e.Modified, Fixed: fixed})
		}
	}
	var modList []*module
	for _, m := range mods {
		modList = append(modList, m)
	}
	slices.SortFunc(modList, func(a, b *module) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(vulns, func(a, b vuln) int { return strings.Compare(a.ID, b.ID) })
	for name, v := range map[string]any{
		"db.json":      map[string]string{"modified": latest},
		"modules.json": modList,
		"vulns.json":   vulns,
	} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("vulndb: %d entries, %d modules, modified %s\n", len(vulns), len(modList), latest)
	return nil
}

type finding struct {
	OSV          string `json:"osv"`
	FixedVersion string `json:"fixed_version"`
	Trace        []struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Function string `json:"function"`
	} `json:"trace"`
}

// judge reads govulncheck's JSON stream and reports whether a required
// module has a known vulnerability.
func judge(r io.Reader, w io.Writer) (bool, error) {
	dec := json.NewDecoder(r)
	modules := map[string]string{}
	stdlib := map[string]string{}
	called := map[string]bool{}
	for {
		var msg struct {
			Finding *finding `json:"finding"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return false, fmt.Errorf("reading govulncheck output: %w", err)
		}
		f := msg.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		t := f.Trace[0]
		line := fmt.Sprintf("%s in %s@%s, fixed in %s", f.OSV, t.Module, t.Version, f.FixedVersion)
		if t.Function != "" {
			called[line] = true
		}
		if t.Module == "stdlib" {
			stdlib[line] = f.OSV
		} else {
			modules[line] = f.OSV
		}
	}
	for _, set := range []struct {
		name string
		m    map[string]string
	}{{"standard library (fixed by a newer Go release)", stdlib}, {"required modules", modules}} {
		lines := slices.Sorted(maps.Keys(set.m))
		fmt.Fprintf(w, "govulncheck: %d known vulnerabilities in the %s\n", len(lines), set.name)
		for _, l := range lines {
			mark := ""
			if called[l] {
				mark = " (called)"
			}
			fmt.Fprintf(w, "  %s%s\n", l, mark)
		}
	}
	return len(modules) > 0, nil
}
