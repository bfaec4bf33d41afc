package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// electionRow is one election as the commands print it.
type electionRow struct {
	Name   string        `json:"name"`
	Leader string        `json:"leader"` // the holder description; "" when no one leads
	Led    bool          `json:"led"`
	Fence  uint64        `json:"fence"` // the leader's term, or the last term when no one leads
	TTL    time.Duration `json:"ttl_ns"`
}

func electionOf(info lease.Info) electionRow {
	r := electionRow{Name: strings.TrimPrefix(info.Key, election.KeyPrefix), Fence: info.Fence}
	if info.Held {
		r.Led, r.Leader, r.TTL = true, info.Holder, info.TTL
	}
	return r
}

func printElection(tw *tabwriter.Writer, r electionRow) {
	leader, ttl := "-", "-"
	if r.Led {
		leader, ttl = orDash(r.Leader), r.TTL.Round(time.Millisecond).String()
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Name, leader, r.Fence, ttl)
}

func newElectionCmd() *cobra.Command {
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "election",
		Short: "Show who leads each election (package election), with the term's fence and time left",
		Long: `Shows the elections of package election on a store: who leads each one
(the leader's holder description), its term's fence and the time the term has
left on the store. An election is the lease "election/NAME".

` + storeHelp,
	}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "leader NAME",
		Short: "Show who leads NAME (exit status 1 when no one does)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := election.KeyPrefix + args[0]
			if args[0] == "" {
				return exitErr{code: 2, err: fmt.Errorf("empty election name")}
			}
			if err := leasedriver.ValidateKey(key); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				info, err := s.Leases.Inspect(ctx, key)
				if err != nil {
					return err
				}
				r := electionOf(info)
				if !r.Led {
					if r.Fence != 0 {
						return notFound("no one leads %q now (the last term's fence was %d)", args[0], r.Fence)
					}
					return notFound("no one leads %q, and the store has no record of it", args[0])
				}
				return f.emit(cmd.OutOrStdout(), r, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "ELECTION\tLEADER\tFENCE\tTTL\n")
					printElection(tw, r)
				})
			})
		},
	})
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the elections that have a leader (--all: also those without one now)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				l, ok := s.Leases.(lease.Lister)
				if !ok {
					return fmt.Errorf("%w: listing elections on %s", storeopen.ErrNotSupported, s.Kind)
				}
				rows := []electionRow{}
				for after := ""; ; {
					infos, err := l.List(ctx, election.KeyPrefix, after, lease.MaxListLimit)
					if err != nil {
						return err
					}
					for _, info := range infos {
						if r := electionOf(info); r.Led || all {
							rows = append(rows, r)
						}
					}
					if len(infos) < lease.MaxListLimit {
						break
					}
					after = infos[len(infos)-1].Key
				}
				return f.emit(cmd.OutOrStdout(), rows, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "ELECTION\tLEADER\tFENCE\tTTL\n")
					led := 0
					for _, r := range rows {
						printElection(tw, r)
						if r.Led {
							led++
						}
					}
					fmt.Fprintf(tw, "%d elections, %d with a leader\n", len(rows), led)
				})
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "also list the elections no one leads now (with their last term's fence)")
	cmd.AddCommand(list)
	return cmd
}
