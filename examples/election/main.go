// Command election is one active worker among several processes: run it
// three times on one SQLite file and one of them leads (and works) at a
// time; stop or kill the leader and the next one leads within the term's
// TTL, with a greater fence for its writes.
//
//	go run ./examples/election -db /tmp/election.db -holder worker-1 &
//	go run ./examples/election -db /tmp/election.db -holder worker-2 &
//	go run ./examples/election -db /tmp/election.db -holder worker-3 &
//
// Each process prints "leading fence=F" when its term begins, "work
// fence=F n=N" while it works, and "stopped leading: ..." when the term
// ends. The work writes through the term's guard: a row of the file's
// "leader_log" table, admitted only while the term holds (CheckHolder in
// the same transaction), so a leader that woke after its term never writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func main() {
	db := flag.String("db", "election.db", "the SQLite file every worker shares")
	holder := flag.String("holder", "", "this worker's name (default: host name and process ID)")
	ttl := flag.Duration("ttl", 2*time.Second, "the term's lease TTL: how long a dead leader keeps the term")
	every := flag.Duration("every", 200*time.Millisecond, "how often the leader works")
	terms := flag.Int("terms", 0, "resign after each term's this many pieces of work (0: lead until stopped)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A stop asked for while the worker still starts (opening the file,
	// creating the log table) ends it cleanly too: the store's error then
	// says the call was interrupted, not why it could not start.
	if err := run(ctx, *db, *holder, *ttl, *every, *terms); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path, holder string, ttl, every time.Duration, perTerm int) error {
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS leader_log (fence INTEGER NOT NULL, holder TEXT NOT NULL, n INTEGER NOT NULL)`); err != nil {
		return err
	}
	e, err := election.New(st.Leases(), "examples/worker", &election.Options{Holder: holder, TTL: ttl})
	if err != nil {
		return err
	}
	return e.Run(ctx, election.Callbacks{
		OnStartedLeading: func(ctx context.Context, t *election.Term) {
			fmt.Printf("leading fence=%d\n", t.Fence())
			for n := 1; perTerm == 0 || n <= perTerm; n++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(every):
				}
				if err := work(ctx, st, t, e.Holder(), n); err != nil {
					fmt.Printf("work refused fence=%d: %v\n", t.Fence(), err)
					return
				}
				fmt.Printf("work fence=%d n=%d\n", t.Fence(), n)
			}
		},
		OnStoppedLeading: func(err error) { fmt.Printf("stopped leading: %v\n", err) },
	})
}

// work writes one row of the leader's log, in a transaction that checks
// the term still holds.
func work(ctx context.Context, st *sqlitestore.Store, t *election.Term, holder string, n int) error {
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := st.Tx(tx).CheckHolder(ctx, t.Lease()); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO leader_log (fence, holder, n) VALUES (?, ?, ?)`, t.Fence(), holder, n); err != nil {
		return err
	}
	return tx.Commit()
}
