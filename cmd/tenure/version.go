package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// versionInfo is what `tenure version` reports: which tenure this is and
// what it expects of the stores. Its JSON field names are stable.
type versionInfo struct {
	// Version is the main module's version ("v0.4.0"), "(devel)" for a
	// build from a checkout without a version, or "(unknown)" when the
	// binary carries no build information.
	Version string `json:"version"`
	// Revision is the commit the binary was built from, when known.
	Revision string `json:"revision,omitempty"`
	// Modified reports a build from a checkout with uncommitted changes.
	Modified bool `json:"modified"`
	// Go is the Go version the binary was built with.
	Go string `json:"go"`
	// Schema is, per SQL store ("postgres", "sqlite"), the schema version
	// its code uses and the range it runs on.
	Schema map[string]schemaInfo `json:"schema"`
	// RedisScripts is redisstore.ScriptSet(): which Lua scripts the Redis
	// store loads.
	RedisScripts string `json:"redis_scripts"`
}

// schemaInfo is one SQL store's schema version and the versions it runs on.
type schemaInfo struct {
	// Version is the version the store's code uses (and migrates to).
	Version int `json:"version"`
	// Min and Max are the oldest and newest schema versions the code runs
	// on: Version, and the versions up to the store's window above it
	// (a schema migrated by the next tenure during a rolling upgrade).
	Min int `json:"min"`
	Max int `json:"max"`
}

// schemaRange is the schemaInfo of code at version that runs on schemas up
// to window versions above it.
func schemaRange(version, window int) schemaInfo {
	return schemaInfo{Version: version, Min: version, Max: version + window}
}

// currentVersion is this binary's versionInfo.
func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return newVersionInfo(bi)
}

// newVersionInfo builds the versionInfo of a binary with build information
// bi (nil: none) and the stores linked into this one.
func newVersionInfo(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{
		Version: "(unknown)",
		Go:      runtime.Version(),
		Schema: map[string]schemaInfo{
			"postgres": schemaRange(pgstore.SchemaVersion, pgstore.SchemaWindow),
			"sqlite":   schemaRange(sqlitestore.SchemaVersion, sqlitestore.SchemaWindow),
		},
		RedisScripts: redisstore.ScriptSet(),
	}
	if bi == nil {
		return v
	}
	v.Version = bi.Main.Version
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// build is the version with, for a "(devel)" build, the commit it was
// built from: "v0.4.0", "(devel) 6df640e1a2b3+dirty". A version Go stamped
// from the checkout (v0.4.1-0.20260101120000-6df640e1a2b3+dirty) names
// the commit already.
func (v versionInfo) build() string {
	s := v.Version
	if v.Version == "(devel)" && v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " " + rev
		if v.Modified {
			s += "+dirty"
		}
	}
	return s
}

// schemaShort is "5" when the SQL stores use one schema version, and
// "postgres 5, sqlite 4" otherwise.
func (v versionInfo) schemaShort() string {
	pg, lite := v.Schema["postgres"], v.Schema["sqlite"]
	if pg.Version == lite.Version {
		return fmt.Sprint(pg.Version)
	}
	return fmt.Sprintf("postgres %d, sqlite %d", pg.Version, lite.Version)
}

// Short is the version on one line, as tenure doctor and tenure serve's
// /healthz print it: "tenure v0.4.0 (schema 5, scripts 1a2b3c4d5e6f)".
func (v versionInfo) Short() string {
	return fmt.Sprintf("tenure %s (schema %s, scripts %s)", v.build(), v.schemaShort(), v.RedisScripts)
}

// print writes v as `tenure version` does without --json.
func (v versionInfo) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tenure\t%s\n", v.Version)
	if v.Revision != "" {
		rev := v.Revision
		if v.Modified {
			rev += " (modified)"
		}
		fmt.Fprintf(tw, "revision\t%s\n", rev)
	}
	fmt.Fprintf(tw, "go\t%s\n", v.Go)
	for _, name := range []string{"postgres", "sqlite"} {
		s := v.Schema[name]
		fmt.Fprintf(tw, "%s schema\t%d (runs on %s)\n", name, s.Version, versionSpan(s.Min, s.Max))
	}
	fmt.Fprintf(tw, "redis scripts\t%s\n", v.RedisScripts)
	tw.Flush()
}

// versionSpan is "5" or "5 to 6".
func versionSpan(min, max int) string {
	if min == max {
		return fmt.Sprint(min)
	}
	return fmt.Sprintf("%d to %d", min, max)
}

func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print tenure's version and the store versions it uses",
		Long: strings.TrimSpace(`
Prints which tenure this is and what it expects of the stores:

  tenure           the module version; "(devel)" for a build from a
                   checkout without one
  revision         the commit it was built from, "(modified)" when the
                   checkout had changes (when known)
  go               the Go version it was built with
  postgres schema  the schema version the PostgreSQL store's code uses, and
                   the versions it runs on: its own and the newer ones it
                   accepts (a schema a newer tenure migrated to during a
                   rolling upgrade)
  sqlite schema    the same for the SQLite store's tables
  redis scripts    an identifier of the Lua scripts the Redis store loads:
                   two builds with the same one run the same scripts

--json prints one object: version, revision (when known), modified, go,
schema.postgres and schema.sqlite (each with version, min and max) and
redis_scripts. It needs no store.`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if !asJSON {
				v.print(cmd.OutOrStdout())
				return nil
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
