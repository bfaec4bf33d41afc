//go:build linux

package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blockedFlock reports whether /proc/locks shows a process waiting for a
// flock of the file whose inode is ino (a line with "->").
func blockedFlock(t *testing.T, ino uint64) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		// "1: -> FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"
		if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], fmt.Sprintf(":%d", ino)) {
			return true
		}
	}
	return false
}

// Open's migration takes the writers' turn of the file, as every write
// transaction of the store does: while another process holds the
// writers' lock (LockFileSuffix), Open waits for it, and migrates once it
// is free. A migration that waited on SQLite's busy handler instead could
// go without the write lock for the whole busy timeout while the other
// processes' writers handed it on among themselves (SQLITE_BUSY).
func TestOpenMigratesInTheWritersTurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenure.db")
	ctx := t.Context()
	unlock, err := fileLock(ctx, path+LockFileSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path+LockFileSuffix, &st); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		s   *Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := Open(context.WithoutCancel(ctx), path, nil)
		done <- opened{s, err}
	}()
	for deadline := time.Now().Add(time.Minute); !blockedFlock(t, st.Ino); time.Sleep(5 * time.Millisecond) {
		select {
		case o := <-done:
			unlock()
			if o.s != nil {
				o.s.Close()
			}
			t.Fatalf("Open returned (err %v) while another holder had the file's writers' lock", o.err)
		default:
		}
		if time.Now().After(deadline) {
			unlock()
			t.Fatal("Open never waited for the file's writers' lock")
		}
	}
	// Waiting: nothing migrated yet.
	raw, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = ?`, DefaultTablePrefix+"migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the migrations table exists while Open waits for the writers' lock")
	}
	unlock()
	o := <-done
	if o.err != nil {
		t.Fatalf("Open after the lock was let go: %v", o.err)
	}
	defer o.s.Close()
	if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM `+DefaultTablePrefix+`migrations`).Scan(&n); err != nil || n != SchemaVersion {
		t.Fatalf("recorded versions after Open: %d (%v), want %d", n, err, SchemaVersion)
	}
}
