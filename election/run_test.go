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
	"testing/synctest"
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

// TestRunResignsWhenStartedLeadingPanics: a panic in OnStartedLeading
// goes on to Run's caller, but only once the term is resigned and
// OnStoppedLeading has been called: a leader whose work died must not
// keep renewing its term.
func TestRunResignsWhenStartedLeadingPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newCounting(t)
		e, err := election.New(st, "panics", &election.Options{Holder: "a", TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var stopped atomic.Int64
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_ = e.Run(t.Context(), election.Callbacks{
				OnStartedLeading: func(context.Context, *election.Term) { panic("the work died") },
				OnStoppedLeading: func(error) { stopped.Add(1) },
			})
		}()
		if r := <-recovered; r != "the work died" {
			t.Fatalf("recovered %v, want the callback's panic", r)
		}
		if n := stopped.Load(); n != 1 {
			t.Fatalf("OnStoppedLeading called %d times, want once", n)
		}
		l, err := e.Leader(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if l.Elected() {
			t.Fatalf("Leader = %+v after the panic, want the term resigned", l)
		}
		renews := st.renews.Load()
		time.Sleep(time.Second) // over three TTLs: no renewal may come
		if n := st.renews.Load(); n != renews {
			t.Fatalf("%d renewals after the panic, want none", n-renews)
		}
	})
}

// TestRunSpacesOutTermsGivenUpAtOnce: when OnStartedLeading returns at
// once, term after term, Run backs off between campaigns (up to
// ObserveEvery) instead of campaigning in a tight loop.
func TestRunSpacesOutTermsGivenUpAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newCounting(t)
		e, err := election.New(st, "quick", &election.Options{Holder: "a", TTL: 3 * time.Second, ObserveEvery: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var terms atomic.Int64
		err = e.Run(ctx, election.Callbacks{OnStartedLeading: func(context.Context, *election.Term) {
			if terms.Add(1) == 1000 {
				cancel() // a tight loop: stop it, and fail below
			}
		}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v after %d terms, want the 10s deadline", err, terms.Load())
		}
		// 10s of backoffs of at most 1s (each at least half its bound).
		t.Logf("%d terms in 10s", terms.Load())
		if n := terms.Load(); n < 10 || n > 40 {
			t.Fatalf("%d terms in 10s, want between 10 and 40", n)
		}
	})
}

// seconds reports the time a term has left in whole seconds, rounded
// down, as etcd does, and wakes no one.
type seconds struct{ *counting }

func (s seconds) Inspect(ctx context.Context, key string) (lease.Info, error) {
	info, err := s.counting.Inspect(ctx, key)
	info.TTL = info.TTL.Truncate(time.Second)
	return info, err
}

// TestObserveEndOfTermInWholeSeconds: on a store that reports the time
// left in whole seconds, the last second of a term reads as 0. Observe
// must still report the term's end soon after it, not an ObserveEvery
// later.
func TestObserveEndOfTermInWholeSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := seconds{newCounting(t)}
		e, err := election.New(st, "seconds", &election.Options{ObserveEvery: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// A leader that crashed at once: its term ends on the store at
		// +1.5s.
		if _, err := st.Acquire(t.Context(), e.Key(), lease.NewToken(), 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var seen []election.Leader
		for l, err := range e.Observe(t.Context()) {
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, l)
			if !l.Elected() {
				break
			}
		}
		if len(seen) != 2 || !seen[0].Elected() {
			t.Fatalf("Observe reported %+v, want the term then no leader", seen)
		}
		// The term ended at +1.5s; reads of it with no time left come at
		// most 100ms apart.
		if took := time.Since(start); took < 1500*time.Millisecond || took > 1600*time.Millisecond {
			t.Fatalf("the end of the term reported at +%v, want between +1.5s and +1.6s", took)
		}
	})
}
