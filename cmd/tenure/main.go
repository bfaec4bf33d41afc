// Command tenure is tenure's command line.
//
//	tenure lab [--store URL] [--only NAME]... [--json] [--timeout D]
//
// runs each failure mode tenure closes as an experiment against a store and
// exits non-zero if any of them did not show what it must. Without --store it uses the embedded
// default: a SQLite file in a temp dir, and the in-process memory store.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/lab"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		var e exitErr
		if errors.As(err, &e) {
			os.Exit(e.code)
		}
		os.Exit(1)
	}
}

// exitErr is an error that sets the command's exit status.
type exitErr struct {
	code int
	err  error
}

func (e exitErr) Error() string { return e.err.Error() }
func (e exitErr) Unwrap() error { return e.err }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "tenure",
		Short:         "Shared state that decides business outcomes: fenced leases and their guards",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newLab())
	root.AddCommand(newProof())
	root.AddCommand(newDoctor())
	root.AddCommand(newServe())
	root.AddCommand(newMigrate(), newSweep())
	root.AddCommand(newVersion())
	root.AddCommand(newLeaseCmd(), newElectionCmd(), newSessionCmd(), newScheduleCmd(), newLimitCmd(), newIdempotencyCmd())
	return root
}

func newLab() *cobra.Command {
	var (
		store   string
		only    []string
		asJSON  bool
		list    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Reproduce the failure modes tenure closes against a real store",
		Long: `Runs each failure mode that tenure closes (a paused holder writing late, a
release deleting another holder's lock, a retried request charging twice, a
late save reviving a session, a limiter over-admitting, a slot settled twice)
as an experiment against a real store through tenure's public API. Each
prints its measurements as name=value pairs with a verdict; the exit status
is 1 if any experiment did not show what it must. --list says what each
experiment shows.

--store selects the store:
  (none)                the embedded default: a SQLite file in a temp dir, and memory
  memory                the in-process store
  sqlite:PATH           a SQLite file
  redis://HOST:PORT     Redis or Redis Cluster
  postgres://…          PostgreSQL (uses the schema tenure_lab)
  etcd://HOST:PORT[,…]  etcd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				for _, e := range lab.Experiments() {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\n    %s\n    must print: %s\n", e.Name, e.Shows, e.Want)
				}
				return nil
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout must be positive, got %v", timeout)
			}
			if _, err := lab.Lookup(only); err != nil {
				return err // before any store is opened
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			envs, err := lab.Open(ctx, store)
			if err != nil {
				return err
			}
			defer func() {
				for _, e := range envs {
					e.Close()
				}
			}()
			results, err := lab.Run(ctx, envs, &lab.Options{Only: only, JSON: asJSON, Out: cmd.OutOrStdout()})
			if err != nil {
				return err
			}
			for _, r := range results {
				if !r.OK {
					return errors.New("lab: some experiments failed")
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL (default: embedded SQLite file and memory)")
	cmd.Flags().StringArrayVar(&only, "only", nil, "run only this experiment (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per result")
	cmd.Flags().BoolVar(&list, "list", false, "list the experiments and what each must show")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}
