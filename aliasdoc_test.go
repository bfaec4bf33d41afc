package tenure_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/session"
)

// The application-facing aliases of driver structs show the fields in
// their doc comments (go doc shows no fields for an alias): every field of
// the struct is listed, so the list cannot fall behind the struct.
func TestAliasDocsListFields(t *testing.T) {
	for _, c := range []struct {
		dir, name string
		typ       any
	}{
		{"ratelimit", "Decision", ratelimit.Decision{}},
		{"ratelimit", "Limit", ratelimit.Limit{}},
		{"lease", "Grant", lease.Grant{}},
		{"lease", "Info", lease.Info{}},
		{"session", "Record", session.Record{}},
		{"idempotency", "Record", idempotency.Record{}},
	} {
		doc := aliasDoc(t, c.dir, c.name)
		if doc == "" {
			t.Errorf("%s.%s: no doc comment", c.dir, c.name)
			continue
		}
		rt := reflect.TypeOf(c.typ)
		for i := range rt.NumField() {
			f := rt.Field(i)
			if !f.IsExported() {
				continue
			}
			if !regexp.MustCompile(`(?m)^\s*` + f.Name + `\b`).MatchString(doc) {
				t.Errorf("%s.%s: the doc comment does not list field %s", c.dir, c.name, f.Name)
			}
		}
	}
}

// aliasDoc returns the doc comment of type name in the package in dir.
func aliasDoc(t *testing.T, dir, name string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.Name == name {
						if ts.Doc != nil {
							return ts.Doc.Text()
						}
						return g.Doc.Text()
					}
				}
			}
		}
	}
	return ""
}
