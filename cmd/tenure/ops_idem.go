package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/idempotency"
)

// idemAdmin returns the store's idempotency view as an Admin.
func idemAdmin(s *storeopen.Stores) (idempotency.Admin, error) {
	st, err := storeopen.Need(s, s.Idempotency, "idempotency records")
	if err != nil {
		return nil, err
	}
	a, ok := st.(idempotency.Admin)
	if !ok {
		return nil, fmt.Errorf("%w: listing and settling idempotency records on %s", storeopen.ErrNotSupported, s.Kind)
	}
	return a, nil
}

// settleErr maps a refused settlement to exit status 1 (no such record,
// the record moved, holds a result, or its claim is live) and leaves the
// rest (bad input, store unreachable) to opsFlags.with (2).
func settleErr(err error) error {
	for _, e := range []error{idempotency.ErrNotFound, idempotency.ErrChanged, idempotency.ErrCompleted, idempotency.ErrInProgress} {
		if errors.Is(err, e) {
			if e == idempotency.ErrInProgress {
				err = fmt.Errorf("%w (the claim is live: an executor may still be running; --force settles it anyway)", err)
			}
			return exitErr{code: 1, err: err}
		}
	}
	return err
}

// idemState describes a record, in the words of every idempotency command
// (the states are the values of list --state).
func idemState(r idempotency.Record) string {
	return idemWords(r.State(), r.Outcome)
}

// idemWords describes a record in state st with outcome o.
func idemWords(st driver.RecordState, o idempotency.Outcome) string {
	switch st {
	case idempotency.StateDone:
		if o.Failed {
			return "done (final error: " + o.Message + ")"
		}
		return "done (" + strconv.Itoa(len(o.Value)) + " bytes recorded)"
	case idempotency.StateInProgress:
		return "in-progress"
	case idempotency.StateUnknown:
		return "unknown (the claim ended without a result)"
	}
	return "-"
}

func idemTable(tw *tabwriter.Writer, recs []idempotency.Record) {
	fmt.Fprintf(tw, "SCOPE\tKEY\tSTATE\tFENCE\tCLAIM TTL\tRETAINED FOR\n")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", strings.ReplaceAll(r.Scope, "\t", " "), r.Key, idemState(r), r.Fence,
			orDash(durOrEmpty(r.ClaimTTL)), orDash(durOrEmpty(r.Expires)))
	}
}

// addIdempotencyAdminCmds adds list, resolve and release to the
// idempotency command.
func addIdempotencyAdminCmds(cmd *cobra.Command, f *opsFlags) {
	var (
		state, scopePrefix string
		limit              int
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List records: their state (in-progress, unknown, done), fence and remaining retention",
		Long: `Lists live records, at most --limit of them: ordered by scope and key on SQL
stores; on Redis, the first found by scanning the store's keys, sorted.
Records whose state is "unknown" had a claim that ended without a result:
reconcile them, then settle them with resolve or release.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := idempotency.ParseRecordState(state)
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			filter, err := driver.ValidateFilter(idempotency.Filter{State: st, ScopePrefix: scopePrefix, Limit: limit})
			if err != nil || limit == 0 {
				if err == nil {
					err = fmt.Errorf("--limit must be positive, got %d", limit)
				}
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				a, err := idemAdmin(s)
				if err != nil {
					return err
				}
				recs, err := a.List(ctx, filter)
				if err != nil {
					return err
				}
				if recs == nil {
					recs = []idempotency.Record{}
				}
				return f.emit(cmd.OutOrStdout(), recs, func(tw *tabwriter.Writer) {
					idemTable(tw, recs)
					fmt.Fprintf(tw, "%d records\n", len(recs))
				})
			})
		},
	}
	list.Flags().StringVar(&state, "state", "", "only records in this state: in-progress, unknown or done")
	list.Flags().StringVar(&scopePrefix, "scope", "", "only records whose scope starts with PREFIX")
	list.Flags().IntVar(&limit, "limit", idempotency.DefaultListLimit, fmt.Sprintf("at most this many records (1 to %d)", idempotency.MaxListLimit))
	cmd.AddCommand(list)

	var (
		fence                  uint64
		force                  bool
		valueFile, value, msg  string
		retention              time.Duration
		valueSet, errSet, file bool
	)
	settleArgs := func(args []string) (idempotency.Settle, error) {
		s := idempotency.Settle{ID: idempotency.ID{Scope: args[0], Key: args[1]}, Fence: fence, Force: force}
		if err := driver.ValidateSettle(s); err != nil {
			return s, fmt.Errorf("--fence (the record's fence, as show or list report it): %w", err)
		}
		return s, nil
	}
	// settled prints the record after a change.
	settled := func(cmd *cobra.Command, ctx context.Context, s *storeopen.Stores, id idempotency.ID, what string) error {
		r, err := s.Idempotency.Inspect(ctx, id)
		if err != nil {
			return err
		}
		return f.emit(cmd.OutOrStdout(), r, func(tw *tabwriter.Writer) {
			fmt.Fprintf(tw, "%s key %q in scope %q\n", what, id.Key, id.Scope)
			if r.Exists {
				idemTable(tw, []idempotency.Record{r})
			}
		})
	}
	resolve := &cobra.Command{
		Use:   "resolve SCOPE KEY --fence F (--value-file FILE | --value STRING | --error MESSAGE)",
		Short: "Record a reconciled result for a record whose outcome is unknown; retries replay it",
		Long: `Records the result found by reconciliation as the result of KEY in SCOPE, so
that every retry with the key replays it (--value or --value-file: the value
as the service recorded it, e.g. an HTTP response recorded by the middleware;
--error: a final error, replayed as such). --fence is the record's fence as
show or list report it: if the record moved on since (another attempt claimed
it), nothing changes and the command exits 1. A record whose claim is still
live is refused unless --force (its executor's result is then refused).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := settleArgs(args)
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			valueSet, errSet, file = cmd.Flags().Changed("value"), cmd.Flags().Changed("error"), cmd.Flags().Changed("value-file")
			n := 0
			for _, b := range []bool{valueSet, errSet, file} {
				if b {
					n++
				}
			}
			if n != 1 {
				return exitErr{code: 2, err: errors.New("give exactly one of --value-file, --value and --error")}
			}
			var out idempotency.Outcome
			switch {
			case file:
				b, err := os.ReadFile(valueFile)
				if err != nil {
					return exitErr{code: 2, err: fmt.Errorf("--value-file: %w", err)}
				}
				out.Value = b
			case valueSet:
				out.Value = []byte(value)
			default:
				if msg == "" {
					return exitErr{code: 2, err: errors.New("--error needs a message")}
				}
				out.Failed, out.Message = true, msg
			}
			if err := driver.ValidateRetention(retention); err != nil {
				return exitErr{code: 2, err: fmt.Errorf("--retention: %w", err)}
			}
			return f.with(cmd, func(ctx context.Context, st *storeopen.Stores) error {
				a, err := idemAdmin(st)
				if err != nil {
					return err
				}
				if err := a.Resolve(ctx, s, out, retention); err != nil {
					return settleErr(err)
				}
				return settled(cmd, ctx, st, s.ID, "resolved")
			})
		},
	}
	resolve.Flags().Uint64Var(&fence, "fence", 0, "the record's fence, as show or list report it (required)")
	resolve.Flags().BoolVar(&force, "force", false, "settle a record whose claim is still live")
	resolve.Flags().StringVar(&valueFile, "value-file", "", "record the contents of FILE as the value")
	resolve.Flags().StringVar(&value, "value", "", "record STRING as the value")
	resolve.Flags().StringVar(&msg, "error", "", "record a final error with MESSAGE")
	resolve.Flags().DurationVar(&retention, "retention", 24*time.Hour, "keep the result this long")
	resolve.MarkFlagRequired("fence")
	cmd.AddCommand(resolve)

	release := &cobra.Command{
		Use:   "release SCOPE KEY --fence F",
		Short: "Drop the claim of a record whose outcome is unknown, so that the next retry runs",
		Long: `Drops the claim of KEY in SCOPE: the next request with the key runs again,
under a greater fence. Use it when reconciliation found that the earlier
attempt took no effect. --fence is the record's fence as show or list report
it: if the record moved on since, nothing changes and the command exits 1. A
record whose claim is still live is refused unless --force; a record that
holds a result is refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := settleArgs(args)
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, st *storeopen.Stores) error {
				a, err := idemAdmin(st)
				if err != nil {
					return err
				}
				if err := a.ForceRelease(ctx, s); err != nil {
					return settleErr(err)
				}
				return settled(cmd, ctx, st, s.ID, "released")
			})
		},
	}
	release.Flags().Uint64Var(&fence, "fence", 0, "the record's fence, as show or list report it (required)")
	release.Flags().BoolVar(&force, "force", false, "release a record whose claim is still live")
	release.MarkFlagRequired("fence")
	cmd.AddCommand(release)
}
