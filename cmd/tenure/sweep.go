package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/retention"
)

func newSweep() *cobra.Command {
	var (
		f      opsFlags
		o      retention.Options
		passes int
	)
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Delete what is past its retention (ended leases, expired records), in bounded passes",
		Long: `Runs the store's sweep: the rows of leases that ended (at least
--fence-retention ago, 0 by default; the store's fence floor is raised to their
fences first, so later fences stay above them), expired idempotency
records, sessions, rate limit state and permits, and final schedule records
older than --schedule-retention (each job's latest kept) with their ledger
rows. Each pass deletes at most --limit rows of each kind and never a live
one; passes repeat until nothing is left or --max passes ran.

On Redis every other key carries a TTL, so a sweep deletes old schedule
records only; on etcd locks expire with their etcd lease and there is nothing
to sweep.

` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if passes < 1 {
				return exitErr{code: 2, err: fmt.Errorf("--max must be at least 1, got %d", passes)}
			}
			if _, err := o.Resolve(); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				sw := s.Sweeper()
				if sw == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: nothing to sweep (its keys expire on their own)\n", s.Kind)
					return nil
				}
				total := retention.Result{Deleted: map[string]int{}}
				n := 0
				start := time.Now()
				for n < passes {
					r, err := sw.Sweep(ctx, o)
					if err != nil {
						return err
					}
					n++
					for k, v := range r.Deleted {
						total.Add(k, v)
					}
					total.More = r.More
					if !r.More {
						break
					}
				}
				out := struct {
					Passes  int            `json:"passes"`
					Deleted map[string]int `json:"deleted"`
					More    bool           `json:"more"`
				}{n, total.Deleted, total.More}
				return f.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "KIND\tDELETED\n")
					for _, k := range []string{retention.Leases, retention.Idempotency, retention.Sessions, retention.RateLimits,
						retention.Permits, retention.ScheduleSlots, retention.ScheduleLedger} {
						if v, ok := total.Deleted[k]; ok {
							fmt.Fprintf(tw, "%s\t%d\n", k, v)
						}
					}
					fmt.Fprintf(tw, "%d rows in %d passes (%s)\n", total.Total(), n, time.Since(start).Round(time.Millisecond))
					if total.More {
						fmt.Fprintf(tw, "more is left: run again or raise --max\n")
					}
				})
			})
		},
	}
	f.add(cmd)
	cmd.Flags().IntVar(&o.Limit, "limit", retention.DefaultLimit, "most rows of each kind one pass deletes")
	cmd.Flags().IntVar(&passes, "max", 100, "most passes")
	cmd.Flags().DurationVar(&o.FenceRetention, "fence-retention", retention.DefaultFenceRetention, "keep lease rows this long after their lease ended")
	cmd.Flags().DurationVar(&o.ScheduleRetention, "schedule-retention", retention.DefaultScheduleRetention, "keep final schedule records this long")
	return cmd
}
