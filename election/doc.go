// Package election elects one active instance among the instances of a
// service, on any lease.Store: one leader at a time for a name, its term
// fenced like any lease, the others waiting in arrival order.
//
// A campaigner waits in the store's queue for the election's lease (see
// lease.Locker.Acquire), keeps it alive while it leads and gives it up when
// it resigns:
//
//	e, err := election.New(store.Leases(), "billing-settler", &election.Options{Holder: host})
//	term, err := e.Campaign(ctx)   // waits until this instance leads
//	defer term.Resign(context.Background())
//	settle(term.Context(), term.Fence()) // the term's context ends before the store could end the term
//
// A term ends when it is resigned, when its validity runs out without a
// renewal (a paused or partitioned leader) or when a renewal is refused
// (the store ended it). In the first two cases Term.Done closes before
// another instance can lead. A term the store ended (an operator's forced
// release) is noticed at the next renewal, up to a third of the TTL later,
// while another instance may lead already; the fence is what turns the old
// leader's writes away then. The term's fence is the lease's: pass it to
// the guards where the leader's writes land (package fence, each store's
// Admit, CheckHolder, HolderSet or Compare), so that a leader that woke
// after its term never writes over its successor.
//
// Election.Leader reads who leads now (its holder description, fence and
// time left) and Election.Observe follows the changes: every leader it
// reports was the store's leader when read, in the order of their terms.
// Election.Run campaigns again and again with callbacks, in the manner of
// Kubernetes' leaderelection.
//
// The election's lease key is "election/" + name, so `tenure lease list
// --prefix election/` and the dashboard show the leaders.
package election
