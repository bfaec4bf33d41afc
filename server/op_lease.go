package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// leaseOps are the operations on leases: lease.Store's calls and
// lease.Lister's list.
var leaseOps = []operation{
	&op[serveapi.AcquireLease, serveapi.LeaseGrant]{Method: "POST", Path: "/v1/leases/acquire", ID: "acquireLease",
		Needs: leaseView, Scope: "key", Problems: []string{"held"}, Handle: acquireLease,
		Doc: "Acquire a lease (optionally waiting for a held key: a long poll bounded by max_wait). " +
			"Without token the server makes one; the response carries it, and it is the client's secret.",
		Example: serveapi.AcquireLease{Key: "billing/close-month", TTL: serveapi.Duration(30 * time.Second)}},
	&op[serveapi.LeaseToken, serveapi.LeaseGrant]{Method: "POST", Path: "/v1/leases/renew", ID: "renewLease",
		Needs: leaseView, Scope: "key", Required: []string{"ttl"}, Problems: []string{"not_held"},
		Doc:     "Extend a lease held by token to ttl from now (store clock).",
		Example: serveapi.LeaseToken{Key: "billing/close-month", Token: "R7FJKTDJ6NNMY7V2J5BMYEMBIO", TTL: serveapi.Duration(30 * time.Second)},
		Handle: func(ctx context.Context, r *request, in serveapi.LeaseToken) (serveapi.LeaseGrant, error) {
			g, err := r.s.st.Leases.Renew(ctx, in.Key, in.Token, in.TTL.D())
			return serveapi.LeaseGrant{Key: in.Key, Fence: g.Fence, TTL: serveapi.Duration(g.TTL)}, err
		}},
	&op[serveapi.LeaseToken, noBody]{Method: "POST", Path: "/v1/leases/leave", ID: "leaveLeaseQueue",
		Needs: leaseView, Scope: "key",
		Doc:     "Give up the place a token keeps in a key's queue of waiters (an acquire with stay whose caller stopped waiting). Leaving a queue one is not in is not an error.",
		Example: serveapi.LeaseToken{Key: "billing/close-month", Token: "R7FJKTDJ6NNMY7V2J5BMYEMBIO"},
		Handle: func(ctx context.Context, r *request, in serveapi.LeaseToken) (noBody, error) {
			if err := leasedriver.ValidateKey(in.Key); err != nil {
				return noBody{}, err
			}
			if err := leasedriver.ValidateToken(in.Token); err != nil {
				return noBody{}, err
			}
			if q, ok := r.s.st.Leases.(leasedriver.Queuer); ok {
				return noBody{}, q.Leave(ctx, in.Key, in.Token)
			}
			return noBody{}, nil
		}},
	&op[serveapi.LeaseToken, noBody]{Method: "POST", Path: "/v1/leases/release", ID: "releaseLease",
		Needs: leaseView, Scope: "key", Problems: []string{"not_held"},
		Doc:     "End a lease held by token.",
		Example: serveapi.LeaseToken{Key: "billing/close-month", Token: "R7FJKTDJ6NNMY7V2J5BMYEMBIO"},
		Handle: func(ctx context.Context, r *request, in serveapi.LeaseToken) (noBody, error) {
			return noBody{}, r.s.st.Leases.Release(ctx, in.Key, in.Token)
		}},
	&op[inspectLeaseQuery, serveapi.LeaseInfo]{Method: "GET", Path: "/v1/leases/inspect", ID: "inspectLease",
		Needs: leaseView, Scope: "key",
		Doc:     "The state of a key, unchanged.",
		Example: inspectLeaseQuery{Key: "billing/close-month"},
		Handle: func(ctx context.Context, r *request, in inspectLeaseQuery) (serveapi.LeaseInfo, error) {
			info, err := r.s.st.Leases.Inspect(ctx, in.Key)
			return leaseInfo(info), err
		}},
	&op[listLeasesQuery, serveapi.LeaseList]{Method: "GET", Path: "/v1/leases", ID: "listLeases",
		Needs: listView, Scope: "prefix", Handle: listLeases,
		Doc:     "The keys the store remembers under a prefix (held, or released or expired with their last fence), in key order.",
		Example: listLeasesQuery{Prefix: "billing/", Limit: 100}},
}

// inspectLeaseQuery is the query of inspectLease.
type inspectLeaseQuery struct {
	Key string `query:"key" doc:"the lease key"`
}

// listLeasesQuery is the query of listLeases.
type listLeasesQuery struct {
	Prefix string `query:"prefix,omitempty" doc:"key prefix, which the token's namespaces must cover (default: every key)"`
	After  string `query:"after,omitempty" doc:"start after this key (the previous page's next)"`
	Limit  int    `query:"limit,omitempty" default:"100" doc:"the most keys to return"`
}

// drainedNote ends the detail of a held answer to an acquire that was
// waiting when the server began to drain.
const drainedNote = "stopped waiting: the server is shutting down"

// acquireLease tries to acquire until it is granted, the key is held past
// the request's wait, or the server drains. An acquire that arrives while
// the server drains does not wait.
func acquireLease(ctx context.Context, r *request, in serveapi.AcquireLease) (serveapi.LeaseGrant, error) {
	s := r.s
	if in.Wait < 0 || in.Wait.D() > s.cfg.MaxWait {
		return serveapi.LeaseGrant{}, invalidf("wait %v out of range [0, %v]", in.Wait.D(), s.cfg.MaxWait)
	}
	if in.Wait > 0 && r.batch {
		return serveapi.LeaseGrant{}, invalidf("an acquire that waits (wait %v) cannot be a call of a batch: send it on its own", in.Wait.D())
	}
	if err := leasedriver.ValidateHolder(in.Holder); err != nil {
		return serveapi.LeaseGrant{}, err
	}
	if in.Stay != 0 {
		if err := leasedriver.ValidateStay(in.Stay.D()); err != nil {
			return serveapi.LeaseGrant{}, err
		}
	}
	token := in.Token
	if token == "" {
		token = lease.NewToken()
	}
	deadline := time.Now().Add(in.Wait.D())
	if in.Wait > 0 {
		release, ok := s.hold("wait", r.p.t.name, s.cfg.MaxWaits)
		if !ok {
			return serveapi.LeaseGrant{}, &problemError{serveapi.NewProblem(serveapi.TypeRateLimited,
				fmt.Sprintf("token %q has %d acquires waiting already (max_waits)", r.p.t.name, s.cfg.MaxWaits))}
		}
		defer release()
	}
	// A waiting acquire keeps a place in the store's queue of waiters, if
	// it has one, and is woken by a release, if the store can tell: no
	// polling but the fallback at the holder's TTL or waitPoll.
	// A caller that asks for a place (stay) keeps it across its own
	// attempts: the server leaves the queue only for the places it took
	// itself.
	var (
		queue leasedriver.Queuer
		wake  <-chan string
	)
	stay := in.Stay.D()
	if in.Wait > 0 || stay > 0 {
		queue, _ = s.st.Leases.(leasedriver.Queuer)
		stay = max(stay, 3*waitPoll)
	}
	me := leasedriver.WaiterID(token)
	if in.Wait > 0 {
		if w, ok := s.st.Leases.(leasedriver.Waker); ok {
			// A queued acquire is woken by the wake-ups that name it (or
			// none); one outside a queue by every wake-up.
			watchAs := ""
			if queue != nil {
				watchAs = me
			}
			if ch, stop, err := w.Watch(ctx, in.Key, watchAs); err == nil {
				wake = ch
				defer stop()
			}
		}
	}
	giveUp := func(err error) (serveapi.LeaseGrant, error) {
		if queue != nil && in.Stay == 0 {
			go func() {
				lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				queue.Leave(lctx, in.Key, token)
			}()
		}
		return serveapi.LeaseGrant{}, err
	}
	for attempt := 0; ; attempt++ {
		// Every attempt after the first costs the token as a request
		// does: a long wait is charged by the store calls it makes.
		if attempt > 0 {
			if ok, _ := s.charge(ctx, r.p.t.name, 1); !ok {
				return giveUp(&problemError{serveapi.NewProblem(serveapi.TypeRateLimited,
					fmt.Sprintf("token %q is over its rate limit: stopped waiting for %q", r.p.t.name, in.Key))})
			}
		}
		var (
			g   lease.Grant
			err error
		)
		if queue != nil {
			g, err = queue.AcquireQueued(ctx, in.Key, token, in.TTL.D(), in.Holder, stay)
		} else {
			g, err = leasedriver.AcquireAs(ctx, s.st.Leases, in.Key, token, in.TTL.D(), in.Holder)
		}
		if err == nil {
			return serveapi.LeaseGrant{Key: in.Key, Token: token, Fence: g.Fence, TTL: serveapi.Duration(g.TTL)}, nil
		}
		var held *lease.HeldError
		left := time.Until(deadline)
		if !errors.As(err, &held) || left <= 0 || s.isDraining() {
			return giveUp(err)
		}
		if attempt == 0 && s.onWait != nil {
			s.onWait()
		}
		// Back off with jitter (woken by a release: up to waitPoll), never
		// past the deadline nor much past the holder's remaining time.
		d := min(10*time.Millisecond<<min(attempt, 5), waitPoll)
		d = d/2 + rand.N(d/2+1)
		if wake != nil {
			d = waitPoll
		}
		if held.TTL > 0 {
			d = min(d, held.TTL+time.Millisecond)
		}
		d = min(d, left)
		if werr := s.pauseWait(ctx, d, wake, me); errors.Is(werr, errDrained) {
			return giveUp(fmt.Errorf("%w (%s)", err, drainedNote))
		} else if werr != nil {
			return giveUp(err)
		}
	}
}

// errDrained ends a waiting acquire when the server begins to drain.
var errDrained = errors.New(drainedNote)

// pauseWait waits d between a waiting acquire's attempts, or until a
// wake-up names this waiter (me) or any, and returns ctx's error or
// errDrained if the wait must end.
func (s *Server) pauseWait(ctx context.Context, d time.Duration, wake <-chan string, me string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case who := <-wake:
			if who == "" || who == me {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.draining:
			return errDrained
		}
	}
}

// waitPoll is the longest a waiting acquire sleeps between attempts.
const waitPoll = 250 * time.Millisecond

func leaseInfo(i lease.Info) serveapi.LeaseInfo {
	return serveapi.LeaseInfo{Key: i.Key, Held: i.Held, Fence: i.Fence, TTL: serveapi.Duration(i.TTL), Holder: i.Holder}
}

func listLeases(ctx context.Context, r *request, in listLeasesQuery) (serveapi.LeaseList, error) {
	infos, err := r.s.st.Leases.(lease.Lister).List(ctx, in.Prefix, in.After, in.Limit)
	if err != nil {
		return serveapi.LeaseList{}, err
	}
	out := serveapi.LeaseList{Leases: make([]serveapi.LeaseInfo, 0, len(infos))}
	for _, i := range infos {
		// The store lists by raw prefix; a namespace is a path segment
		// ("billing" does not hold "billing-internal/…").
		if r.p.allows(i.Key) {
			out.Leases = append(out.Leases, leaseInfo(i))
		}
	}
	if len(infos) == in.Limit {
		out.Next = infos[len(infos)-1].Key
	}
	return out, nil
}
