package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/store/memstore"
)

// Three instances of a service campaign for one election; one leads at a
// time, and when it resigns the next in line leads, with a greater fence
// for its writes.
func Example() {
	store, err := memstore.New(nil) // one store that every instance reaches
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var instances []*election.Election
	for _, host := range []string{"worker-1", "worker-2", "worker-3"} {
		e, err := election.New(store.Leases(), "settlement", &election.Options{Holder: host, TTL: 10 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		instances = append(instances, e)
	}
	var last uint64
	for _, e := range instances {
		term, err := e.Campaign(ctx) // waits while another instance leads
		if err != nil {
			log.Fatal(err)
		}
		who, err := e.Leader(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s leads, fence above the last term's: %v\n", who.Holder, term.Fence() > last)
		last = term.Fence()
		// ... the leader's work, with term.Context() and term.Fence() ...
		if err := term.Resign(ctx); err != nil {
			log.Fatal(err)
		}
	}
	who, _ := instances[0].Leader(ctx)
	fmt.Println("leading after the last resign:", who.Elected())
	// Output:
	// worker-1 leads, fence above the last term's: true
	// worker-2 leads, fence above the last term's: true
	// worker-3 leads, fence above the last term's: true
	// leading after the last resign: false
}

// Run keeps an instance campaigning: it does the leader's work while it
// leads and campaigns again when the term ends.
func ExampleElection_Run() {
	store, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.New(store.Leases(), "report", &election.Options{Holder: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	err = e.Run(ctx, election.Callbacks{
		OnStartedLeading: func(ctx context.Context, t *election.Term) {
			fmt.Println("leading")
			stop() // the service shuts down; the term is resigned
			<-ctx.Done()
		},
		OnStoppedLeading: func(err error) { fmt.Println("stopped leading:", err) },
	})
	fmt.Println("Run:", err)
	// Output:
	// leading
	// stopped leading: election: the term was resigned
	// Run: context canceled
}
