//go:build unix

package sqlitestore_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// The writers of several processes on one file take turns through the
// lock file next to it: a write transaction holds its lock to the end.
func TestWriteTransactionHoldsTheLockFile(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := open(t, path, nil)
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path+sqlitestore.LockFileSuffix, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the lock file: %v", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock of the lock file during a write transaction: %v, want EWOULDBLOCK", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock of the lock file after the commit: %v", err)
	}
	// Another process's writer holding it makes this one's wait.
	done := make(chan error, 1)
	go func() {
		_, err := s.Leases().Acquire(ctx, "k", lease.NewToken(), time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("acquire while another process holds the lock file returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
