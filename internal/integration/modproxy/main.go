// Command modproxy packs every Go module of a checkout, at one version,
// into a file-based module proxy (GOPROXY=file://DIR), as if each had
// been tagged: every requirement of a tenure module at the zero version
// becomes a requirement at that version, as a release does before it tags.
// scripts/release-check builds scratch consumers against it.
//
//	go run ./modproxy -root ../.. -out /tmp/proxy -version v0.99.0-check.1
package main

import (
	"archive/zip"
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// zero is the version at which tenure's modules require each other
// between releases.
const zero = "v0.0.0-00010101000000-000000000000"

var semver = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

func main() {
	root := flag.String("root", ".", "the checkout")
	out := flag.String("out", "", "the proxy directory to write")
	version := flag.String("version", "", "the version every module gets (vX.Y.Z[-pre])")
	flag.Parse()
	if *out == "" || !semver.MatchString(*version) {
		fmt.Fprintln(os.Stderr, "modproxy: -out and a semantic -version (vX.Y.Z[-pre]) are required")
		os.Exit(2)
	}
	if err := run(*root, *out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// module is one go.mod of the checkout.
type module struct{ dir, path string }

func run(root, out, version string) error {
	mods, err := modules(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if err := pack(m, mods, out, version); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
		fmt.Printf("%s@%s\n", m.path, version)
	}
	return nil
}

// modules finds every go.mod under root but those in .git and testdata.
func modules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" || d.IsDir() {
			return nil
		}
		path, err := modulePath(p)
		if err != nil {
			return err
		}
		mods = append(mods, module{dir: filepath.Dir(p), path: path})
		return nil
	})
	return mods, err
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s names no module", gomod)
}

// pack writes m's .mod, .zip, .info and list files into the proxy.
func pack(m module, all []module, out, version string) error {
	raw, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	gomod := []byte(strings.ReplaceAll(string(raw), zero, version))
	dir := filepath.Join(out, escape(m.path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "list"), []byte(version+"\n"), 0o644); err != nil {
		return err
	}
	nested := map[string]bool{}
	for _, o := range all {
		if o.dir != m.dir {
			nested[o.dir] = true
		}
	}
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		return err
	}
	zw := zip.NewWriter(zf)
	prefix := m.path + "@" + version + "/"
	err = filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != m.dir && (nested[p] || d.Name() == ".git" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // the go command leaves symbolic links out of module zips
		}
		rel, err := filepath.Rel(m.dir, p)
		if err != nil {
			return err
		}
		w, err := zw.Create(prefix + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if rel == "go.mod" {
			_, err = w.Write(gomod)
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	return err
}

// escape applies the module proxy's case encoding: an upper-case letter
// becomes '!' and its lower-case form.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
