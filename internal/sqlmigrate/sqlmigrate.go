// Package sqlmigrate reads the numbered migration files of tenure's SQL
// stores: pairs of files named NNNN_name.up.sql and NNNN_name.down.sql in
// the root of an fs.FS, applied in the order of their numbers (down files
// in the reverse order), each with a placeholder for the name the store's
// tables live under (a PostgreSQL schema, an SQLite table prefix). It holds
// what pgstore and sqlitestore share; each store applies the files itself,
// under its own lock.
//
// Migrations are expand-first: an up file adds tables, columns and
// indexes that the code of the version before ignores, and drops or
// renames nothing ([Contracting] finds the statements that would), so the
// code of version N runs on a schema at N or N+1 ([Window]) and a rolling
// upgrade runs old and new instances side by side.
//
// A down file undoes its up file. Where undoing would drop what a
// guarantee rests on (fences, ledger rows, revocations), it says so in
// guard comments:
//
//	-- tenure:guard fences of released leases
//	-- tenure:guard-sql SELECT count(*) FROM {{schema}}.fences
//
// The query counts the rows that would be lost; a store refuses to run the
// down file while any guard counts rows, unless forced ([Refusal]).
package sqlmigrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"
)

// Window is how many schema versions above its own the code of a version
// runs on: code of version N accepts a schema at N or N+1.
const Window = 1

// ErrDownRefused reports a down migration that would drop rows a guarantee
// rests on. The error is a *[Refusal] that lists them.
var ErrDownRefused = errors.New("down migration would lose data a guarantee rests on")

// ErrVersion reports a schema whose recorded version is not the one the
// store's code knows. The error names both versions.
var ErrVersion = errors.New("schema version mismatch")

// Migration is one numbered migration file.
type Migration struct {
	// Version is the file's number, 1 for the first.
	Version int
	// Name is the part of the file name between the number and ".up.sql".
	Name string
	// File is the file's name in the migrations' fs.FS.
	File string
	// SQL is the file's text with the placeholder still in it.
	SQL string
	// DownFile is the name of the down file (NNNN_name.down.sql).
	DownFile string
	// Down is the down file's text with the placeholder still in it.
	Down string
	// Guards are the down file's guards, in order.
	Guards []Guard
}

// Guard is one guard of a down file: what the down migration would lose,
// and the query that counts it.
type Guard struct {
	// What names what would be lost ("fences of released leases").
	What string `json:"what"`
	// SQL is a query returning one count, placeholder still in it.
	SQL string `json:"-"`
}

// Loss is what a down migration would lose: a guard whose query counted
// rows.
type Loss struct {
	// Version is the migration whose down file has the guard.
	Version int `json:"version"`
	// What is the guard's description.
	What string `json:"what"`
	// Rows is the count the guard's query returned.
	Rows int64 `json:"rows"`
}

// Refusal is the error of a down migration refused for what it would lose.
// It wraps [ErrDownRefused].
type Refusal struct {
	// Store names the store ("pgstore").
	Store string
	// Lost lists what would be lost, by version from the newest.
	Lost []Loss
}

func (r *Refusal) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s:", r.Store, ErrDownRefused)
	for i, l := range r.Lost {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " version %d would drop %d %s", l.Version, l.Rows, l.What)
	}
	b.WriteString(" (force it only once nothing depends on them)")
	return b.String()
}

// Unwrap returns ErrDownRefused.
func (r *Refusal) Unwrap() error { return ErrDownRefused }

// Status is what a schema holds compared with the migrations a store's
// code knows.
type Status struct {
	// Current is the highest version recorded in the schema (0: none).
	Current int
	// Latest is the highest version the code knows.
	Latest int
	// Applied are the versions recorded in the schema, in order.
	Applied []int
	// Pending are the known migrations above Current, in order.
	Pending []Migration
	// Legacy reports tables created before versions were recorded (no
	// version table, but the store's tables are there). Migration 1 adopts
	// them: it creates only what is missing and records version 1.
	Legacy bool
	// Compatible reports whether the code runs on the schema as it is:
	// Current is Latest, or at most [Window] above it.
	Compatible bool
	// Drift are the versions, in order, whose recorded checksum is not the
	// [Checksum] of the code's file of that version: the schema was built
	// from another text of it (an edited file, another tool's copy).
	// Versions recorded without a checksum are not compared.
	Drift []int
}

// Checksum is the SHA-256, in hex, of the statements of m's up file as
// the code knows it (placeholder unresolved; comments, blank lines and the
// spaces around each line left out, so that a file whose comments change
// keeps its checksum): the value Migrate records for the versions it
// applies.
func Checksum(m Migration) string {
	h := sha256.New()
	for _, line := range strings.Split(stripComments(m.SQL), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			h.Write([]byte(line))
			h.Write([]byte{'\n'})
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Drifted returns, in order, the versions of ms whose checksum in recorded
// (version to checksum; an empty checksum is not compared) differs from
// the file's.
func Drifted(ms []Migration, recorded map[int]string) []int {
	var out []int
	for _, m := range ms {
		if c := recorded[m.Version]; c != "" && c != Checksum(m) {
			out = append(out, m.Version)
		}
	}
	return out
}

// Load returns the migrations in the root of fsys, sorted by version. Names
// must be NNNN_name.up.sql with versions 1, 2, 3, ... and no gaps, each
// with its NNNN_name.down.sql; a guard comment without its query is an
// error.
func Load(fsys fs.FS) ([]Migration, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	downs := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if strings.HasSuffix(name, ".down.sql") {
			downs[name] = true
			continue
		}
		if !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".up.sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 || rest == "" {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.up.sql", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		downName := strings.TrimSuffix(name, ".up.sql") + ".down.sql"
		d, err := fs.ReadFile(fsys, downName)
		if err != nil {
			return nil, fmt.Errorf("migration file %q has no down file %q: %w", name, downName, err)
		}
		delete(downs, downName)
		guards, err := parseGuards(string(d))
		if err != nil {
			return nil, fmt.Errorf("migration file %q: %w", downName, err)
		}
		out = append(out, Migration{Version: v, Name: rest, File: name, SQL: string(b),
			DownFile: downName, Down: string(d), Guards: guards})
	}
	for name := range downs {
		return nil, fmt.Errorf("migration file %q has no up file", name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration files: version %d is missing (found %s)", i+1, m.File)
		}
	}
	return out, nil
}

// parseGuards reads the guard comments of a down file: each
// "-- tenure:guard WHAT" line followed by its "-- tenure:guard-sql QUERY"
// line.
func parseGuards(down string) ([]Guard, error) {
	var out []Guard
	var open *Guard
	for _, line := range strings.Split(down, "\n") {
		line = strings.TrimSpace(line)
		if q, ok := strings.CutPrefix(line, "-- tenure:guard-sql "); ok {
			if open == nil {
				return nil, fmt.Errorf("guard query %q without a guard before it", q)
			}
			open.SQL = strings.TrimSpace(q)
			out = append(out, *open)
			open = nil
			continue
		}
		if w, ok := strings.CutPrefix(line, "-- tenure:guard "); ok {
			if open != nil {
				return nil, fmt.Errorf("guard %q has no query", open.What)
			}
			open = &Guard{What: strings.TrimSpace(w)}
		}
	}
	if open != nil {
		return nil, fmt.Errorf("guard %q has no query", open.What)
	}
	return out, nil
}

// MustLoad is Load for the files a store embeds; a bad file is a bug.
func MustLoad(fsys fs.FS, dir string) []Migration {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	ms, err := Load(sub)
	if err != nil {
		panic(err)
	}
	return ms
}

// Resolve returns sql with every placeholder replaced by value.
func Resolve(sql, placeholder, value string) string {
	return strings.ReplaceAll(sql, placeholder, value)
}

// FS returns the up files of the migrations as an fs.FS of
// NNNN_name.up.sql files with the placeholder replaced by value, as goose,
// golang-migrate or atlas apply them.
func FS(ms []Migration, placeholder, value string) fs.FS {
	m := fstest.MapFS{}
	for _, mg := range ms {
		m[path.Base(mg.File)] = &fstest.MapFile{Data: []byte(Resolve(mg.SQL, placeholder, value)), Mode: 0o444}
	}
	return m
}

// DownFS returns the down files of the migrations, NNNN_name.down.sql
// with the placeholder replaced by value: next to FS's files, the layout
// golang-migrate reads.
func DownFS(ms []Migration, placeholder, value string) fs.FS {
	m := fstest.MapFS{}
	for _, mg := range ms {
		m[path.Base(mg.DownFile)] = &fstest.MapFile{Data: []byte(Resolve(mg.Down, placeholder, value)), Mode: 0o444}
	}
	return m
}

// Check returns nil if current is latest or at most [Window] above it, and
// otherwise an error wrapping ErrVersion that names both versions and what
// to do. what names the schema (`schema "tenure"`, `tables with prefix
// "tenure_"`).
func Check(store, what string, current, latest int) error {
	switch {
	case current >= latest && current <= latest+Window:
		return nil
	case current > latest:
		return fmt.Errorf("%s: %s is at version %d; this tenure is at version %d and runs on versions %d to %d: %w (upgrade tenure, or migrate down with the newer tenure)",
			store, what, current, latest, latest, latest+Window, ErrVersion)
	case current == 0:
		return fmt.Errorf("%s: %s has no recorded version (version 0), this tenure needs version %d: %w (run Migrate or `tenure migrate up`)",
			store, what, latest, ErrVersion)
	default:
		return fmt.Errorf("%s: %s is at version %d, this tenure needs version %d: %w (run Migrate or `tenure migrate up`)",
			store, what, current, latest, ErrVersion)
	}
}

// Pending returns the migrations above current.
func Pending(ms []Migration, current int) []Migration {
	var out []Migration
	for _, m := range ms {
		if m.Version > current {
			out = append(out, m)
		}
	}
	return out
}

// Compatible reports whether code at version latest runs on a schema at
// current (see [Check]).
func Compatible(current, latest int) bool {
	return current >= latest && current <= latest+Window
}

// DownPlan returns the migrations whose down files take a schema at
// current to version to, newest first. to must be at least 0 and at most
// current; a current above the newest migration ms knows is an error (the
// down files of those versions are not known).
func DownPlan(ms []Migration, current, to int) ([]Migration, error) {
	if to < 0 || to > current {
		return nil, fmt.Errorf("cannot migrate down from version %d to version %d", current, to)
	}
	if current > len(ms) {
		return nil, fmt.Errorf("schema is at version %d, this tenure has the down files up to version %d: %w (migrate down with the tenure that applied it)",
			current, len(ms), ErrVersion)
	}
	var out []Migration
	for v := current; v > to; v-- {
		out = append(out, ms[v-1])
	}
	return out, nil
}

// contracting are the statements that take away what the code of the
// version before reads.
var contracting = regexp.MustCompile(`(?is)\b(DROP\s+(TABLE|COLUMN|INDEX|FUNCTION|SEQUENCE|SCHEMA|VIEW|TRIGGER|CONSTRAINT|DEFAULT)|RENAME\b|ALTER\s+COLUMN\s+\S+\s+(TYPE|SET\s+NOT\s+NULL|SET\s+DATA)|ALTER\s+TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?\S+\s+DROP\b|TRUNCATE\b|DELETE\s+FROM|ADD\s+CONSTRAINT|CREATE\s+UNIQUE\s+INDEX)`)

// addNotNull is a column added NOT NULL: without a DEFAULT, the version
// before's inserts, which do not name it, fail.
var addNotNull = regexp.MustCompile(`(?is)\bADD\s+(COLUMN\s+)?(IF\s+NOT\s+EXISTS\s+)?\S+\s[^;]*\bNOT\s+NULL\b`)
var hasDefault = regexp.MustCompile(`(?is)\bDEFAULT\b`)

// Contracting returns the statements of an up file that are not
// expand-only (drops, renames, type changes, new NOT NULL constraints on
// existing columns, columns added NOT NULL without a default, new
// constraints and unique indexes, deletes), comments left out. An up file
// for which it returns none keeps the schema readable and writable by the
// code of the version before. It is conservative: a unique index on a
// table the same file creates is reported too.
func Contracting(sql string) []string {
	code := stripComments(sql)
	out := contracting.FindAllString(code, -1)
	for _, stmt := range strings.Split(code, ";") {
		if m := addNotNull.FindString(stmt); m != "" && !hasDefault.MatchString(stmt) {
			out = append(out, m)
		}
	}
	return out
}

// stripComments returns sql without its "--" comments, a line each.
func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String()
}
