//go:build unix

package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// fileLock takes the writers' lock file at path (see LockFileSuffix) with
// flock: at once if it is free, else waiting for it until ctx ends or
// queueWait passes, as a writer waits for SQLite's lock (only this
// process's writer whose turn it is waits here, for one transaction of
// each other process at a time, since a waiting process is woken as soon
// as the lock is free). A lock file that
// cannot be created (a read-only directory) is no lock: the writers then
// take turns in SQLite's busy handler. It returns the function that
// releases the lock. A process that dies holding it releases it (the
// kernel closes its files).
func fileLock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return func() {}, nil
	}
	fd := int(f.Fd())
	unlock := func() { f.Close() } // closing the file releases its lock
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return unlock, nil
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return func() {}, nil
	}
	done := make(chan error, 1)
	go func() { done <- flockWait(fd) }()
	t := time.NewTimer(queueWait)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sqlitestore: lock %s: %w", path, err)
		}
		return unlock, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errFileLockTimeout
	}
	// Given up: the waiting flock ends when the other process lets go
	// (or dies); the file is closed then, releasing the lock if it came.
	go func() {
		<-done
		f.Close()
	}()
	return nil, err
}

// errFileLockTimeout is the error of a writer that waited queueWait for
// another process's writer.
var errFileLockTimeout = errors.New("database is locked: another process's transaction has held the write lock for 5s")

// flockWait waits for an exclusive flock on fd, again after a signal.
func flockWait(fd int) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
