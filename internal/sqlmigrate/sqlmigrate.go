// Package sqlmigrate reads the numbered migration files of tenure's SQL
// stores: files named NNNN_name.up.sql in the root of an fs.FS, applied in
// the order of their numbers, each with a placeholder for the name the
// store's tables live under (a PostgreSQL schema, an SQLite table prefix).
// It holds what pgstore and sqlitestore share; each store applies the files
// itself, under its own lock.
package sqlmigrate

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"
)

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
}

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
}

// Load returns the migrations in the root of fsys, sorted by version. Names
// must be NNNN_name.up.sql with versions 1, 2, 3, ... and no gaps.
func Load(fsys fs.FS) ([]Migration, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".up.sql") {
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
		out = append(out, Migration{Version: v, Name: rest, File: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration files: version %d is missing (found %s)", i+1, m.File)
		}
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

// FS returns the migrations as an fs.FS of NNNN_name.up.sql files with the
// placeholder replaced by value, as goose, golang-migrate or atlas apply
// them.
func FS(ms []Migration, placeholder, value string) fs.FS {
	m := fstest.MapFS{}
	for _, mg := range ms {
		m[path.Base(mg.File)] = &fstest.MapFile{Data: []byte(Resolve(mg.SQL, placeholder, value)), Mode: 0o444}
	}
	return m
}

// Check returns nil if current is latest, and otherwise an error wrapping
// ErrVersion that names both versions and what to do. what names the
// schema (`schema "tenure"`, `tables with prefix "tenure_"`).
func Check(store, what string, current, latest int) error {
	switch {
	case current == latest:
		return nil
	case current > latest:
		return fmt.Errorf("%s: %s is at version %d, newer than version %d this tenure knows: %w (upgrade tenure before using this schema)",
			store, what, current, latest, ErrVersion)
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
