package election_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/memstore"
)

// counting is a lease.Store that counts the acquires and renewals it
// passes on, and can fail Inspect. It hides the store's optional
// interfaces: holder descriptions and the queue are not kept.
type counting struct {
	lease.Store
	acquires, renews atomic.Int64
	failInspect      atomic.Bool
}

func (c *counting) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	c.acquires.Add(1)
	return c.Store.Acquire(ctx, key, token, ttl)
}

func (c *counting) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	c.renews.Add(1)
	return c.Store.Renew(ctx, key, token, ttl)
}

var errInspect = errors.New("the store cannot be reached")

func (c *counting) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if c.failInspect.Load() {
		return lease.Info{}, errInspect
	}
	return c.Store.Inspect(ctx, key)
}

func newCounting(t *testing.T) *counting {
	t.Helper()
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &counting{Store: m.Leases()}
}

// waitFor waits until ok holds, failing the test after a minute.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRunWithoutStartedLeadingHoldsTheTerm: with no OnStartedLeading, Run
// leads until its context ends, renewing the one term, instead of
// resigning and campaigning again at once.
func TestRunWithoutStartedLeadingHoldsTheTerm(t *testing.T) {
	st := newCounting(t)
	e, err := election.New(st, "hold", &election.Options{Holder: "a", TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, election.Callbacks{OnStoppedLeading: func(error) { stopped.Add(1) }})
	}()
	waitFor(t, "two renewals of the term", func() bool { return st.renews.Load() >= 2 })
	if n := st.acquires.Load(); n != 1 {
		t.Fatalf("%d acquires while one term was renewed, want 1", n)
	}
	if n := stopped.Load(); n != 0 {
		t.Fatalf("OnStoppedLeading called %d times while leading", n)
	}
	l, err := e.Leader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !l.Elected() {
		t.Fatalf("Leader = %+v, want a term", l)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if n := stopped.Load(); n != 1 {
		t.Fatalf("OnStoppedLeading called %d times, want once", n)
	}
	if l, err := e.Leader(t.Context()); err != nil || l.Elected() {
		t.Fatalf("after Run returned: Leader = %+v, %v; want no leader", l, err)
	}
}

// syncBuf is a bytes.Buffer safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunLogsObserveErrors: OnNewLeader's reads that fail are logged, and
// reading goes on: a leader read after the store is back is reported.
func TestRunLogsObserveErrors(t *testing.T) {
	st := newCounting(t)
	st.failInspect.Store(true)
	logs := &syncBuf{}
	e, err := election.New(st, "observed", &election.Options{Holder: "a", ObserveEvery: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var heard atomic.Value
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, election.Callbacks{OnNewLeader: func(l election.Leader) { heard.Store(l) }})
	}()
	waitFor(t, "a logged read error", func() bool { return strings.Contains(logs.String(), "cannot read the leader") })
	if !strings.Contains(logs.String(), errInspect.Error()) {
		t.Fatalf("the log does not say why: %s", logs.String())
	}
	st.failInspect.Store(false)
	waitFor(t, "the leader reported once the store answers", func() bool {
		l, ok := heard.Load().(election.Leader)
		return ok && l.Elected()
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}
