package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sync"
)

// ScriptSet identifies the set of Lua scripts this Store loads: the first
// 12 hex digits of a SHA-256 over every script's file name and body, in
// name order. Two builds of tenure with the same ScriptSet run the same
// scripts on Redis; a change to any script, or one added or removed,
// changes it. It does not depend on the server and is the same for every
// Store of one build. tenure version, tenure doctor and tenure serve's
// /healthz print it.
func ScriptSet() string { return scriptSetOnce() }

var scriptSetOnce = sync.OnceValue(func() string {
	id, err := scriptSet(luaFiles, "lua")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	return id
})

// scriptSet hashes the .lua files of dir in fsys as ScriptSet describes.
// Each name and body is written with its length first, so that no two
// different sets hash the same bytes.
func scriptSet(fsys fs.FS, dir string) (string, error) {
	ents, err := fs.ReadDir(fsys, dir) // sorted by name
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range ents {
		if e.IsDir() || path.Ext(e.Name()) != ".lua" {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%d:%s\n%d:", len(e.Name()), e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}
