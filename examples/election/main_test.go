package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// worker is one process of the example and what it printed.
type worker struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	led  []uint64 // the fences of the terms it began
	done chan struct{}
	errs bytes.Buffer // what it wrote to stderr (guarded by mu)
}

// Write collects the worker's stderr.
func (w *worker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs.Write(p)
}

// stderr is what the worker wrote to stderr so far.
func (w *worker) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs.String()
}

var leadingLine = regexp.MustCompile(`^leading fence=(\d+)$`)

func (w *worker) terms() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.led...)
}

// Three processes on one SQLite file: one leads at a time; when the leader
// is killed another leads, with a greater fence, and the log its guard
// admitted never goes back to an older term.
func TestThreeProcesses(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "election")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	db := filepath.Join(dir, "election.db")
	var workers []*worker
	for i := 1; i <= 3; i++ {
		w := &worker{name: fmt.Sprintf("worker-%d", i), done: make(chan struct{})}
		w.cmd = exec.Command(bin, "-db", db, "-holder", w.name, "-ttl", "1s", "-every", "20ms")
		w.cmd.Stderr = w
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(w.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if m := leadingLine.FindStringSubmatch(sc.Text()); m != nil {
					f, _ := strconv.ParseUint(m[1], 10, 64)
					w.mu.Lock()
					w.led = append(w.led, f)
					w.mu.Unlock()
				}
			}
		}()
		t.Cleanup(func() { w.cmd.Process.Kill(); w.cmd.Wait() })
		workers = append(workers, w)
	}
	leaders := func() []*worker {
		var out []*worker
		for _, w := range workers {
			if len(w.terms()) > 0 {
				out = append(out, w)
			}
		}
		return out
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("a leader", func() bool { return len(leaders()) > 0 })
	first := leaders()
	if len(first) != 1 {
		t.Fatalf("%d processes began a term at once", len(first))
	}
	dead := first[0]
	f1 := dead.terms()[0]
	// The leader works; the others wait.
	log, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	rows := func() int {
		var n int
		log.QueryRowContext(context.Background(), `SELECT count(*) FROM leader_log`).Scan(&n)
		return n
	}
	waitFor("the leader's work", func() bool { return rows() >= 3 })
	if n := len(leaders()); n != 1 {
		t.Fatalf("%d processes led while the first one's term lasted", n)
	}
	if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dead.done
	var next *worker
	waitFor("a new leader after the kill", func() bool {
		for _, w := range workers {
			if w != dead && len(w.terms()) > 0 {
				next = w
				return true
			}
		}
		return false
	})
	if f2 := next.terms()[0]; f2 <= f1 {
		t.Fatalf("the new term's fence %d is not above the dead leader's %d", f2, f1)
	}
	before := rows()
	waitFor("the new leader's work", func() bool { return rows() >= before+3 })
	// The admitted log, in the order written, never goes back to an
	// older term.
	r, err := log.QueryContext(context.Background(), `SELECT fence, holder FROM leader_log ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for r.Next() {
		var f uint64
		var h string
		if err := r.Scan(&f, &h); err != nil {
			t.Fatal(err)
		}
		if f < last {
			t.Fatalf("a write of term %d (%s) admitted after one of term %d", f, h, last)
		}
		last = f
	}
	r.Close()
	// The survivors stop cleanly on SIGTERM (the leader resigns).
	for _, w := range workers {
		if w == dead {
			continue
		}
		w.cmd.Process.Signal(syscall.SIGTERM)
		if err := w.cmd.Wait(); err != nil {
			t.Errorf("%s on SIGTERM: %v; its stderr:\n%s", w.name, err, w.stderr())
		}
	}
}
