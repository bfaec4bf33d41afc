package tenancy

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Group keeps the grants of one holder alive with one loop, as one
// session keeps many locks alive: each member is renewed every TTL/3 of
// its own, again after a jittered backoff while the store does not
// answer, and never with a request that outlives its validity (a late
// reply cannot help; the grant ends on its own then). A member that is
// lost leaves the group and ends the group's context with its error as
// the cause.
type Group struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *slog.Logger
	what   string // names the grants in log records

	busy sync.Mutex // held while a round of renewals is in flight

	mu      sync.Mutex
	members map[*Grant]*member
	stopped bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

type member struct {
	next  time.Time
	fails int
}

// NewGroup starts an empty group under ctx. Its Context ends when ctx
// does, when a member is lost (the cause is the member's error) and when
// the group stops (context.Canceled). Renewals run under ctx's values but
// not its cancellation. log (nil: none) gets a debug record per failed
// renewal, naming the grants what.
func NewGroup(ctx context.Context, log *slog.Logger, what string) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Group{parent: ctx, log: log, what: what, members: map[*Grant]*member{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancelCause(ctx)
	go k.loop()
	return k
}

// Context returns the group's context.
func (k *Group) Context() context.Context { return k.ctx }

// Add makes g a member: its first renewal is due a third of its ttl after
// the request that granted it was sent (at once if that is past). A grant
// that has already ended as lost ends the group's context at once.
func (k *Group) Add(g *Grant) {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.members[g] = &member{next: g.renewDue(time.Now())}
	k.mu.Unlock()
	g.whenEnded(func() { k.ended(g) })
	k.poke()
}

// Remove takes g out of the group. Once it returns no renewal of g is in
// flight or will be sent, so g can be released.
func (k *Group) Remove(g *Grant) {
	k.mu.Lock()
	delete(k.members, g)
	k.mu.Unlock()
	// An empty critical section is the point: it waits for a round in
	// flight to end.
	k.busy.Lock()
	//lint:ignore SA2001 the barrier above
	k.busy.Unlock()
}

// Stop ends the loop and waits for it (and any renewal in flight), then
// ends the group's context. The members are left as they are.
func (k *Group) Stop() {
	k.mu.Lock()
	first := !k.stopped
	k.stopped = true
	k.members = map[*Grant]*member{}
	k.mu.Unlock()
	if first {
		close(k.stop)
	}
	<-k.done
	k.cancel(context.Canceled)
}

// ended runs when a grant ends: a member lost ends the group's context.
func (k *Group) ended(g *Grant) {
	k.mu.Lock()
	_, ok := k.members[g]
	if ok {
		delete(k.members, g)
	}
	k.mu.Unlock()
	if ok && g.Lost() {
		k.cancel(g.Err())
	}
	k.poke()
}

func (k *Group) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *Group) loop() {
	defer close(k.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		k.busy.Lock()
		next := k.round()
		k.busy.Unlock()
		if next.IsZero() {
			t.Reset(time.Hour)
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-k.stop:
			return
		case <-k.wake:
		case <-t.C:
		}
	}
}

// round renews the members that are due and returns when the next one is
// (zero: none).
func (k *Group) round() time.Time {
	now := time.Now()
	k.mu.Lock()
	var due []*Grant
	for g, m := range k.members {
		if !m.next.After(now) {
			due = append(due, g)
		}
	}
	k.mu.Unlock()
	for _, g := range due {
		k.mu.Lock()
		_, ok := k.members[g]
		k.mu.Unlock()
		if !ok {
			continue // removed or ended meanwhile
		}
		rctx, cancel := context.WithDeadline(context.WithoutCancel(k.parent), g.ValidUntil())
		err := g.Renew(rctx)
		cancel()
		k.mu.Lock()
		if m, ok := k.members[g]; ok {
			switch {
			case err == nil:
				m.fails = 0
				m.next = g.renewDue(time.Now())
			case g.Err() == nil:
				m.fails++
				m.next = time.Now().Add(g.retry(m.fails))
			}
		}
		k.mu.Unlock()
		if err != nil && g.Err() == nil {
			args := append(append([]any{}, g.c.Log...), "fence", g.Fence(), "err", err)
			k.log.DebugContext(k.parent, k.what+": renewal failed, retrying while valid", args...)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var next time.Time
	for _, m := range k.members {
		if next.IsZero() || m.next.Before(next) {
			next = m.next
		}
	}
	return next
}
