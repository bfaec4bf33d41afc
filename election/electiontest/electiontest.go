// Package electiontest is the conformance suite of package election on a
// lease store: one leader at a time, in arrival order, terms fenced and
// ended before the store can end them, and an observer that follows the
// terms in order. Each store's conformance test runs it (storetest runs it
// with the lease suite).
package electiontest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/lease/leasetest"
)

// Run runs the suite; newTarget gives each case a fresh lease target (the
// lease suite's: Store, Direct, Faults and Unit are used).
func Run(t *testing.T, newTarget func(t *testing.T) leasetest.Target) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tg leasetest.Target)
	}{
		{"InvalidInput", testInvalid},
		{"OneLeaderInArrivalOrder", testArrivalOrder},
		{"ObserveFollowsTerms", testObserve},
		{"TermEndsWhenStoreEndsIt", testStoreEndsTerm},
		{"CrashedLeaderReplacedAfterTTL", testCrashedLeader},
		{"ObserveSeesAnExpiredTermGo", testObserveExpiry},
		{"TermLostWhenUnreachable", testUnreachable},
		{"CampaignGivesUpItsPlace", testGiveUp},
		{"RunCallbacks", testRun},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Store == nil || tg.Faults == nil {
				t.Fatal("electiontest: Target needs Store and Faults")
			}
			if tg.Direct == nil {
				tg.Direct = tg.Store
			}
			if tg.Unit <= 0 {
				tg.Unit = 200 * time.Millisecond
			}
			t.Cleanup(tg.Faults.Heal)
			tc.fn(t, tg)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// name returns an election name unique to the running test.
func name(t *testing.T) string {
	return fmt.Sprintf("electiontest/%s/%d", t.Name(), time.Now().UnixNano())
}

// newElection returns the election n on s for holder, with a term of ttl.
func newElection(t *testing.T, s lease.Store, n, holder string, ttl time.Duration) *election.Election {
	t.Helper()
	e, err := election.New(s, n, &election.Options{Holder: holder, TTL: ttl, ObserveEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	return e
}

// leader reads who leads e, failing the test on an error.
func leader(t *testing.T, e *election.Election) election.Leader {
	t.Helper()
	l, err := e.Leader(ctxT(t))
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return l
}

// waitQueued waits until n campaigners wait for e's key (on a store with a
// queue of waiters; elsewhere it waits a moment of the store's time).
func waitQueued(t *testing.T, tg leasetest.Target, e *election.Election, n int) {
	t.Helper()
	if _, ok := tg.Store.(leasedriver.Queuer); !ok {
		time.Sleep(tg.Unit)
		return
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := tg.Direct.Acquire(ctxT(t), e.Key(), lease.NewToken(), time.Minute)
		var held *lease.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("a plain Acquire of a campaigned key: %v, want a *lease.HeldError", err)
		}
		if held.Position == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d campaigners wait, want %d", held.Position, n)
		}
	}
}

type campaign struct {
	term *election.Term
	err  error
}

// start campaigns for e in the background.
func start(t *testing.T, e *election.Election) <-chan campaign {
	ch := make(chan campaign, 1)
	go func() {
		tm, err := e.Campaign(ctxT(t))
		ch <- campaign{tm, err}
	}()
	return ch
}

// won waits for a background campaign to lead.
func won(t *testing.T, ch <-chan campaign, who string) *election.Term {
	t.Helper()
	select {
	case c := <-ch:
		if c.err != nil {
			t.Fatalf("%s's campaign: %v", who, c.err)
		}
		return c.term
	case <-time.After(time.Minute):
		t.Fatalf("%s never led", who)
	}
	return nil
}

func resign(t *testing.T, tm *election.Term) {
	t.Helper()
	if err := tm.Resign(ctxT(t)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	select {
	case <-tm.Done():
	default:
		t.Fatal("the term's Done is open after Resign")
	}
	if !errors.Is(tm.Err(), election.ErrResigned) {
		t.Fatalf("Err after Resign = %v, want ErrResigned", tm.Err())
	}
}

func testInvalid(t *testing.T, tg leasetest.Target) {
	for what, make := range map[string]func() (*election.Election, error){
		"nil store":     func() (*election.Election, error) { return election.New(nil, "n", nil) },
		"empty name":    func() (*election.Election, error) { return election.New(tg.Store, "", nil) },
		"name with NUL": func() (*election.Election, error) { return election.New(tg.Store, "a\x00b", nil) },
		"negative TTL": func() (*election.Election, error) {
			return election.New(tg.Store, "n", &election.Options{TTL: -time.Second})
		},
		"negative ObserveEvery": func() (*election.Election, error) {
			return election.New(tg.Store, "n", &election.Options{ObserveEvery: -1})
		},
		"bad holder": func() (*election.Election, error) {
			return election.New(tg.Store, "n", &election.Options{Holder: "a\nb"})
		},
	} {
		if e, err := make(); !errors.Is(err, election.ErrInvalid) || e != nil {
			t.Errorf("%s: %v, %v; want ErrInvalid and no election", what, e, err)
		}
	}
	// A campaign whose context has ended leads nothing.
	e := newElection(t, tg.Store, name(t), "a", 10*tg.Unit)
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if tm, err := e.Campaign(ctx); !errors.Is(err, context.Canceled) || tm != nil {
		t.Fatalf("Campaign with an ended context: %v, %v", tm, err)
	}
	if l := leader(t, e); l.Elected() {
		t.Fatalf("a leader after a cancelled campaign: %+v", l)
	}
}

// testArrivalOrder: one leader at a time; the next one leads when it
// resigns, in the order they began to campaign, with a greater fence.
func testArrivalOrder(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := 30 * time.Second
	a, b, c := newElection(t, tg.Store, n, "a", ttl), newElection(t, tg.Store, n, "b", ttl), newElection(t, tg.Store, n, "c", ttl)
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if l := leader(t, c); l.Holder != "a" || l.Fence != ta.Fence() || l.TTL <= 0 {
		t.Fatalf("Leader = %+v, want a with fence %d", l, ta.Fence())
	}
	bc := start(t, b)
	waitQueued(t, tg, a, 1)
	cc := start(t, c)
	waitQueued(t, tg, a, 2)
	select {
	case got := <-bc:
		t.Fatalf("b led while a did: %+v", got)
	default:
	}
	resign(t, ta)
	tb := won(t, bc, "b")
	if tb.Fence() <= ta.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", tb.Fence(), ta.Fence())
	}
	if l := leader(t, a); l.Holder != "b" || l.Fence != tb.Fence() {
		t.Fatalf("Leader = %+v, want b", l)
	}
	select {
	case got := <-cc:
		t.Fatalf("c led while b did: %+v", got)
	default:
	}
	resign(t, tb)
	tc := won(t, cc, "c")
	if tc.Fence() <= tb.Fence() {
		t.Fatalf("c's fence %d is not above b's %d", tc.Fence(), tb.Fence())
	}
	resign(t, tc)
	if l := leader(t, a); l.Elected() {
		t.Fatalf("Leader after every term was resigned: %+v", l)
	}
}

// observer collects what Observe yields.
type observer struct {
	mu   sync.Mutex
	seen []election.Leader
	errs []error
	stop context.CancelFunc
	done chan struct{}
}

func observe(t *testing.T, e *election.Election) *observer {
	ctx, cancel := context.WithCancel(ctxT(t))
	o := &observer{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for l, err := range e.Observe(ctx) {
			o.mu.Lock()
			if err != nil {
				o.errs = append(o.errs, err)
			} else {
				o.seen = append(o.seen, l)
			}
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-o.done })
	return o
}

// waitSeen waits until the observer's last report satisfies ok.
func (o *observer) waitSeen(t *testing.T, what string, ok func(election.Leader) bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		o.mu.Lock()
		n := len(o.seen)
		good := n > 0 && ok(o.seen[n-1])
		seen := slices.Clone(o.seen)
		o.mu.Unlock()
		if good {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Observe never reported %s; it reported %+v", what, seen)
		}
	}
}

// terms checks that the observer reported terms in order, and only those
// of want (fences), the zero Leader between them allowed.
func (o *observer) terms(t *testing.T, want ...uint64) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var last uint64
	for _, l := range o.seen {
		if !l.Elected() {
			continue
		}
		if !slices.Contains(want, l.Fence) {
			t.Fatalf("Observe reported a term that never was: %+v (terms %v; reports %+v)", l, want, o.seen)
		}
		if l.Fence < last {
			t.Fatalf("Observe reported the term %d after %d: %+v", l.Fence, last, o.seen)
		}
		last = l.Fence
	}
	if len(o.errs) > 0 {
		t.Fatalf("Observe errors: %v", o.errs)
	}
}

// testObserve: Observe reports each term in order and no one leading once
// the last term was resigned.
func testObserve(t *testing.T, tg leasetest.Target) {
	n := name(t)
	a, b := newElection(t, tg.Store, n, "a", 30*time.Second), newElection(t, tg.Store, n, "b", 30*time.Second)
	watcher := newElection(t, tg.Direct, n, "w", 30*time.Second)
	o := observe(t, watcher)
	o.waitSeen(t, "no leader", func(l election.Leader) bool { return !l.Elected() })
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	o.waitSeen(t, "a", func(l election.Leader) bool { return l.Fence == ta.Fence() && l.Holder == "a" })
	bc := start(t, b)
	waitQueued(t, tg, a, 1)
	resign(t, ta)
	tb := won(t, bc, "b")
	o.waitSeen(t, "b", func(l election.Leader) bool { return l.Fence == tb.Fence() && l.Holder == "b" })
	resign(t, tb)
	o.waitSeen(t, "no leader after the last resign", func(l election.Leader) bool { return !l.Elected() })
	o.terms(t, ta.Fence(), tb.Fence())
}

// testStoreEndsTerm: a term whose lease the store no longer has (released
// by its token elsewhere, as an operator's forced release does) ends at
// the leader's next renewal, with ErrLost, and another campaigner leads.
func testStoreEndsTerm(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := max(3*tg.Unit, 600*time.Millisecond)
	a, b := newElection(t, tg.Store, n, "a", ttl), newElection(t, tg.Store, n, "b", ttl)
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	bc := start(t, b)
	waitQueued(t, tg, a, 1)
	if err := tg.Direct.Release(ctxT(t), a.Key(), ta.Lease().Token().Reveal()); err != nil {
		t.Fatalf("release the term elsewhere: %v", err)
	}
	select {
	case <-ta.Done():
	case <-time.After(ttl + time.Minute):
		t.Fatal("the term did not end after the store ended it")
	}
	if !errors.Is(ta.Err(), lease.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", ta.Err())
	}
	tb := won(t, bc, "b")
	if tb.Fence() <= ta.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", tb.Fence(), ta.Fence())
	}
	if err := ta.Resign(ctxT(t)); err != nil {
		t.Fatalf("resigning a lost term: %v", err)
	}
	if l := leader(t, a); l.Fence != tb.Fence() {
		t.Fatalf("after the lost term resigned: Leader %+v, want b's term %d", l, tb.Fence())
	}
	resign(t, tb)
}

// testCrashedLeader: a leader that stops renewing (a crashed process: its
// lease taken and never renewed) is replaced once its TTL passed, and the
// observer reports the crashed term, then the new one, never the crashed
// one again.
func testCrashedLeader(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := max(3*tg.Unit, 600*time.Millisecond)
	b := newElection(t, tg.Store, n, "b", 30*time.Second)
	o := observe(t, newElection(t, tg.Direct, n, "w", ttl))
	lk, err := lease.New(tg.Store, &lease.Options{Holder: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := lk.TryAcquire(ctxT(t), b.Key(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	o.waitSeen(t, "the crashed leader", func(l election.Leader) bool { return l.Fence == dead.Fence() && l.Holder == "crashed" })
	tb, err := b.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if tb.Fence() <= dead.Fence() {
		t.Fatalf("b's fence %d is not above the crashed leader's %d", tb.Fence(), dead.Fence())
	}
	o.waitSeen(t, "b", func(l election.Leader) bool { return l.Fence == tb.Fence() })
	resign(t, tb)
	o.terms(t, dead.Fence(), tb.Fence())
}

// testObserveExpiry: a leader that crashed with nobody campaigning is
// reported gone once its lease expired. The observer's ObserveEvery is an
// hour and an expiry wakes nothing on most stores: Observe reads the store
// again when the term's time runs out, or it would report the crashed
// leader for that hour.
func testObserveExpiry(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := max(3*tg.Unit, 600*time.Millisecond)
	w, err := election.New(tg.Direct, n, &election.Options{Holder: "w", TTL: ttl, ObserveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := lease.New(tg.Store, &lease.Options{Holder: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := lk.TryAcquire(ctxT(t), w.Key(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	o := observe(t, w)
	o.waitSeen(t, "the crashed leader", func(l election.Leader) bool { return l.Fence == dead.Fence() && l.Holder == "crashed" })
	o.waitSeen(t, "no leader once the crashed term expired", func(l election.Leader) bool { return !l.Elected() })
	if l := leader(t, w); l.Elected() {
		t.Fatalf("Observe reported no leader while Leader reads %+v", l)
	}
	o.terms(t, dead.Fence())
}

// testUnreachable: a leader cut off from the store loses its term (Done,
// ErrLost) once its validity runs out, before the store could give the
// term to another.
func testUnreachable(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := max(3*tg.Unit, 600*time.Millisecond)
	a := newElection(t, tg.Store, n, "a", ttl)
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	tg.Faults.Cut()
	select {
	case <-ta.Done():
	case <-time.After(ttl + time.Minute):
		t.Fatal("the term of a leader cut off from the store never ended")
	}
	ended := time.Now()
	if !errors.Is(ta.Err(), lease.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", ta.Err())
	}
	// The term ends on its validity (the end before which the store
	// cannot have ended it), not after a renewal's timeout: allow for
	// scheduling on a loaded machine only.
	if v, slack := ta.Lease().ValidUntil(), max(50*time.Millisecond, tg.Unit/4); ended.After(v.Add(slack)) {
		t.Fatalf("the term ended %v after its validity", ended.Sub(v))
	}
	tg.Faults.Heal()
	// Another campaigner leads once the store has let the term go.
	b := newElection(t, tg.Direct, n, "b", ttl)
	tb, err := b.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if tb.Fence() <= ta.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", tb.Fence(), ta.Fence())
	}
	resign(t, tb)
}

// testGiveUp: a campaigner whose context ends leaves the queue: the one
// behind it leads as soon as the leader resigns.
func testGiveUp(t *testing.T, tg leasetest.Target) {
	n := name(t)
	ttl := 30 * time.Second
	a, b, c := newElection(t, tg.Store, n, "a", ttl), newElection(t, tg.Store, n, "b", ttl), newElection(t, tg.Store, n, "c", ttl)
	ta, err := a.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctxT(t))
	bc := make(chan error, 1)
	go func() {
		_, err := b.Campaign(bctx)
		bc <- err
	}()
	waitQueued(t, tg, a, 1)
	cc := start(t, c)
	waitQueued(t, tg, a, 2)
	cancel()
	if err := <-bc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the campaign that gave up: %v, want context.Canceled", err)
	}
	waitQueued(t, tg, a, 1)
	resign(t, ta)
	tc := won(t, cc, "c")
	if l := leader(t, a); l.Holder != "c" || l.Fence != tc.Fence() {
		t.Fatalf("Leader = %+v, want c", l)
	}
	resign(t, tc)
}

// testRun: Run leads, runs OnStartedLeading, and when it returns resigns,
// reports the end and campaigns again; OnNewLeader hears each leader.
func testRun(t *testing.T, tg leasetest.Target) {
	n := name(t)
	a := newElection(t, tg.Store, n, "a", 30*time.Second)
	b := newElection(t, tg.Store, n, "b", 30*time.Second)
	ctx, cancel := context.WithCancel(ctxT(t))
	var (
		mu      sync.Mutex
		leaders []string
		stopped []error
		terms   = make(chan uint64, 4)
	)
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, election.Callbacks{
			OnStartedLeading: func(ctx context.Context, tm *election.Term) {
				terms <- tm.Fence()
				<-ctx.Done() // leads until Run's context ends
			},
			OnStoppedLeading: func(err error) {
				mu.Lock()
				stopped = append(stopped, err)
				mu.Unlock()
			},
			OnNewLeader: func(l election.Leader) {
				mu.Lock()
				leaders = append(leaders, l.Holder)
				mu.Unlock()
			},
		})
	}()
	var fa uint64
	select {
	case fa = <-terms:
	case <-time.After(time.Minute):
		t.Fatal("Run never led")
	}
	if l := leader(t, b); l.Holder != "a" || l.Fence != fa {
		t.Fatalf("Leader = %+v, want a's term %d", l, fa)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		heard := slices.Contains(leaders, "a")
		mu.Unlock()
		if heard {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("OnNewLeader never heard of a")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stopped) != 1 || !errors.Is(stopped[0], election.ErrResigned) {
		t.Fatalf("OnStoppedLeading calls %v, want one with ErrResigned", stopped)
	}
	// Run resigned on its way out: b leads at once.
	tb, err := b.Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if tb.Fence() <= fa {
		t.Fatalf("b's fence %d is not above a's %d", tb.Fence(), fa)
	}
	resign(t, tb)
}
