//go:build !unix

package sqlitestore

import "context"

// fileLock is no lock where flock is missing: the writers of several
// processes take turns in SQLite's busy handler.
func fileLock(context.Context, string) (func(), error) { return func() {}, nil }
