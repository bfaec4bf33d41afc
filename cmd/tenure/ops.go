package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	schedriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// storeHelp is the --store part of every operator command's help.
const storeHelp = `--store selects the store (the same URLs as tenure lab):
  (none)                the embedded default: tenure.db in --data-dir
  sqlite:PATH           a SQLite file
  redis://HOST:PORT     Redis or Redis Cluster (--store-prefix, default "tenure:")
  postgres://…          PostgreSQL (--schema, default "tenure")
  etcd://HOST:PORT[,…]  etcd (leases only; --store-prefix, default "tenure/")
  memory                an empty in-process store (for trying the commands)
The commands never create a database, a schema or a file.

Exit status: 0 on success, 1 when what was asked for does not exist, 2 on bad
input or a store that cannot be reached.`

// opsFlags are the flags every operator command shares.
type opsFlags struct {
	store, dataDir, schema, prefix string
	json                           bool
	timeout                        time.Duration
}

func (f *opsFlags) add(cmd *cobra.Command) {
	p := cmd.PersistentFlags()
	p.StringVar(&f.store, "store", "", "store URL (default: the embedded SQLite file in --data-dir)")
	p.StringVar(&f.dataDir, "data-dir", storeopen.DefaultDataDir(), "directory of the embedded default's tenure.db")
	p.StringVar(&f.schema, "schema", "tenure", "PostgreSQL schema of tenure's tables")
	p.StringVar(&f.prefix, "store-prefix", "", "the prefix of every key tenure keeps on Redis or etcd (default: the store's own, \"tenure:\" or \"tenure/\")")
	p.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	p.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
}

// with opens the store, runs fn with it, and maps errors to exit statuses.
func (f *opsFlags) with(cmd *cobra.Command, fn func(ctx context.Context, s *storeopen.Stores) error) error {
	spec, err := storeurl.Parse(f.store)
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	if f.timeout <= 0 {
		return exitErr{code: 2, err: fmt.Errorf("--timeout must be positive, got %v", f.timeout)}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	s, err := storeopen.Open(ctx, spec, &storeopen.Options{DataDir: f.dataDir, Schema: f.schema, Prefix: f.prefix})
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	defer s.Close()
	if err := fn(ctx, s); err != nil {
		var e exitErr
		if errors.As(err, &e) {
			return err
		}
		return exitErr{code: 2, err: err}
	}
	return nil
}

// emit prints v as indented JSON or, without --json, calls table.
func (f *opsFlags) emit(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// notFound is exit status 1: what was asked for does not exist.
func notFound(format string, a ...any) error {
	return exitErr{code: 1, err: fmt.Errorf(format, a...)}
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339) + " (" + now.Sub(t).Round(time.Second).String() + " ago)"
}

// later describes an end time relative to its start ("-" if none).
func later(start, end time.Time) string {
	if end.IsZero() {
		return "-"
	}
	return end.Sub(start).Round(time.Millisecond).String() + " later"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newLeaseCmd() *cobra.Command {
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Inspect and list leases: who holds a key, with which fence, for how long",
		Long:  "Inspect leases on a store.\n\n" + storeHelp,
	}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "inspect KEY",
		Short: "Show whether KEY is held, its fence and the holder's remaining time",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := leasedriver.ValidateKey(args[0]); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				info, err := s.Leases.Inspect(ctx, args[0])
				if err != nil {
					return err
				}
				if !info.Held && info.Fence == 0 {
					if f.json {
						f.emit(cmd.OutOrStdout(), info, nil)
					}
					return notFound("no lease of key %q: not held, and the store has no record of it (never acquired, or its record was reclaimed)", args[0])
				}
				return f.emit(cmd.OutOrStdout(), info, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "KEY\tHELD\tFENCE\tTTL\tHOLDER\n")
					printLease(tw, info)
					switch {
					case info.Held:
						fmt.Fprintf(tw, "held with fence %d, remaining(%s), holder %s\n", info.Fence, info.TTL.Round(time.Millisecond), orDash(info.Holder))
					default:
						fmt.Fprintf(tw, "not held (released or already expired); last fence %d\n", info.Fence)
					}
				})
			})
		},
	})
	var (
		after, keyPrefix string
		limit            int
		all              bool
	)
	list := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List the held keys (--all: free ones and scheduler keys too), with fence, time left and holder",
		Long: `Lists the held keys that start with PREFIX (or --prefix; all keys without
it), in byte order, one page of at most --limit keys after --after: each
key's fence, the holder's remaining time and the holder's description (the
Locker's Options.Holder, by default host name and process ID). The next
page starts after the last key printed.

--all lists free keys too (with their last fence, while the store keeps
their record) and the scheduler's own keys ("schedule/<job>/…": slot
claims, run locks, catch-up permits), which are hidden otherwise unless
PREFIX starts with "schedule/". Supported on memory, SQLite, PostgreSQL,
Redis and etcd.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := keyPrefix
			if len(args) == 1 {
				if keyPrefix != "" && keyPrefix != args[0] {
					return exitErr{code: 2, err: fmt.Errorf("give the key prefix once: PREFIX %q or --prefix %q", args[0], keyPrefix)}
				}
				prefix = args[0]
			}
			if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
				return exitErr{code: 2, err: err}
			}
			showInternal := all || strings.HasPrefix(prefix, "schedule/")
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				l, ok := s.Leases.(lease.Lister)
				if !ok {
					return fmt.Errorf("%w: listing leases on %s", storeopen.ErrNotSupported, s.Kind)
				}
				infos, more, err := listLeases(ctx, l, prefix, after, limit, func(info lease.Info) bool {
					if _, _, internal := schedriver.JobOfKey(info.Key); internal && !showInternal {
						return false
					}
					return all || info.Held
				})
				if err != nil {
					return err
				}
				return f.emit(cmd.OutOrStdout(), infos, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "KEY\tHELD\tFENCE\tTTL\tHOLDER\n")
					held := 0
					for _, info := range infos {
						printLease(tw, info)
						if info.Held {
							held++
						}
					}
					if all {
						fmt.Fprintf(tw, "%d keys, %d held\n", len(infos), held)
					} else {
						fmt.Fprintf(tw, "%d held keys (--all lists free and scheduler keys too)\n", held)
					}
					if more != "" {
						fmt.Fprintf(tw, "more may follow: --after %q\n", more)
					}
				})
			})
		},
	}
	list.Flags().StringVar(&keyPrefix, "prefix", "", "list only keys that start with this (the same as PREFIX)")
	list.Flags().StringVar(&after, "after", "", "list the keys after this one (the last key of the previous page)")
	list.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("most keys to list (1 to %d)", lease.MaxListLimit))
	list.Flags().BoolVar(&all, "all", false, "list free keys and the scheduler's keys too")
	cmd.AddCommand(list)
	return cmd
}

// listLeases reads pages of the store's keys after after until limit keys
// pass keep or the keys run out. more is the key to pass as --after for
// the next page, or "" when none may follow.
func listLeases(ctx context.Context, l lease.Lister, prefix, after string, limit int, keep func(lease.Info) bool) (out []lease.Info, more string, err error) {
	out = []lease.Info{}
	// Full pages: the filter may pass few of the keys a page holds.
	size := lease.MaxListLimit
	for {
		page, err := l.List(ctx, prefix, after, size)
		if err != nil {
			return nil, "", err
		}
		for _, info := range page {
			after = info.Key
			if !keep(info) {
				continue
			}
			out = append(out, info)
			if len(out) == limit {
				return out, info.Key, nil
			}
		}
		if len(page) < size {
			return out, "", nil
		}
	}
}

// printLease prints one row of the lease table.
func printLease(tw *tabwriter.Writer, info lease.Info) {
	ttl, holder := "-", "-"
	if info.Held {
		ttl = info.TTL.Round(time.Millisecond).String()
		holder = orDash(info.Holder)
	}
	fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%s\n", info.Key, info.Held, info.Fence, ttl, holder)
}

func newSessionCmd() *cobra.Command {
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "session",
		Short: "List a user's sessions and end them all",
		Long:  "Inspect and revoke sessions on a store. Tokens are never shown: a session is named by its ID, the SHA-256 of its token.\n\n" + storeHelp,
	}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list USER",
		Short: "List USER's live sessions (IDs, versions, deadlines; never tokens or values)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessiondriver.ValidateUserID(args[0]); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				st, err := storeopen.Need(s, s.Sessions, "sessions")
				if err != nil {
					return err
				}
				recs, err := st.List(ctx, args[0])
				if err != nil {
					return err
				}
				if recs == nil {
					recs = []session.Record{}
				}
				now := time.Now()
				return f.emit(cmd.OutOrStdout(), recs, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "ID\tVERSION\tCREATED\tIDLE UNTIL\tABSOLUTE UNTIL\n")
					for _, r := range recs {
						fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", r.ID.Short(), r.Version, ago(now, r.Created),
							r.IdleUntil.UTC().Format(time.RFC3339), r.AbsoluteUntil.UTC().Format(time.RFC3339))
					}
					fmt.Fprintf(tw, "%d live sessions of %s\n", len(recs), args[0])
				})
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "revoke-user USER",
		Short: "End every session of USER at once (sessions created concurrently included)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessiondriver.ValidateUserID(args[0]); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				st, err := storeopen.Need(s, s.Sessions, "sessions")
				if err != nil {
					return err
				}
				n, err := st.DeleteUser(ctx, args[0])
				if err != nil {
					return err
				}
				out := struct {
					User    string `json:"user"`
					Revoked int    `json:"revoked"`
				}{args[0], n}
				return f.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "revoked %d sessions of %s\n", n, args[0])
				})
			})
		},
	})
	return cmd
}

func newScheduleCmd() *cobra.Command {
	var (
		f     opsFlags
		since time.Duration
		limit int
	)
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Show what happened to a job's slots",
		Long:  "Inspect scheduled jobs on a store.\n\n" + storeHelp,
	}
	f.add(cmd)
	history := &cobra.Command{
		Use:   "history JOB",
		Short: "List JOB's slots since --since: state, node, attempts, fence, times, error, and each attempt",
		Long: `Lists JOB's slots since --since, oldest first: state, node, attempts,
fence, start and end, and the last error. Under each slot, a line per
attempt the slot's record keeps (the latest 16): its number, outcome
(running, done, failed, or superseded: a newer attempt took the slot over),
node, fence, start, end and error. The job's registered definition (the one
that runs) comes first. --json prints the records, each with its
"history".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since <= 0 {
				return exitErr{code: 2, err: fmt.Errorf("--since must be positive, got %v", since)}
			}
			if limit <= 0 {
				return exitErr{code: 2, err: fmt.Errorf("--limit must be positive, got %d", limit)}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				st, err := storeopen.Need(s, s.Schedules, "scheduled jobs")
				if err != nil {
					return err
				}
				now, err := st.Now(ctx)
				if err != nil {
					return err
				}
				recs, err := st.Slots(ctx, args[0], now.Add(-since), now.Add(time.Minute), limit)
				if err != nil {
					return err
				}
				def, err := st.Definition(ctx, args[0])
				if err != nil && !errors.Is(err, schedule.ErrNotFound) {
					return err
				}
				if recs == nil {
					recs = []schedule.Record{}
				}
				if len(recs) == 0 && def.Fingerprint == "" {
					if f.json {
						f.emit(cmd.OutOrStdout(), recs, nil)
					}
					return notFound("no job %q: no registered definition and no slot in the last %v", args[0], since)
				}
				if f.json {
					return f.emit(cmd.OutOrStdout(), recs, nil)
				}
				return f.emit(cmd.OutOrStdout(), recs, func(tw *tabwriter.Writer) {
					if def.Fingerprint != "" {
						fmt.Fprintf(tw, "definition %s: %s (registered by %s, %s)\n", def.Fingerprint, def.Spec, orDash(def.Node), ago(now, def.Registered))
					}
					fmt.Fprintf(tw, "SLOT\tSTATE\tNODE\tATTEMPTS\tFENCE\tSTARTED\tFINISHED\tERROR\n")
					for _, r := range recs {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.SlotTime.UTC().Format(time.RFC3339), r.State,
							orDash(r.Node), r.Attempts, r.Fence, ago(now, r.Started), later(r.Started, r.Finished), orDash(r.Error))
						first := r.Attempts - len(r.History) + 1
						for i, a := range r.History {
							fmt.Fprintf(tw, "  attempt %d\t%s\t%s\t\t%d\t%s\t%s\t%s\n", first+i, a.Outcome, orDash(a.Node), a.Fence,
								ago(now, a.Started), later(a.Started, a.Finished), orDash(a.Error))
						}
					}
					fmt.Fprintf(tw, "%d slots of %s in the last %v\n", len(recs), args[0], since)
				})
			})
		},
	}
	history.Flags().DurationVar(&since, "since", 24*time.Hour, "how far back to look")
	history.Flags().IntVar(&limit, "limit", 500, "at most this many slots")
	cmd.AddCommand(history)
	return cmd
}

func newLimitCmd() *cobra.Command {
	var (
		f         opsFlags
		algorithm string
		rate      int
		period    time.Duration
		burst     int
	)
	cmd := &cobra.Command{
		Use:   "limit",
		Short: "Show a rate limit's current state for a key",
		Long:  "Inspect rate limits on a store.\n\n" + storeHelp,
	}
	f.add(cmd)
	show := &cobra.Command{
		Use:   "show NAME KEY",
		Short: "Show what limit NAME would decide for KEY now, without using any of it",
		Long: `Shows what the limit named NAME (with the algorithm, rate, period and burst
your service configures it with: a limit's state is kept per name, algorithm
and key) would decide for one more request from KEY right now: allowed or not,
what remains, when it is fully available again. Nothing is consumed.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var alg ratelimit.Algorithm
			if err := alg.UnmarshalText([]byte(algorithm)); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				st, err := storeopen.Need(s, s.Limits, "rate limits")
				if err != nil {
					return err
				}
				l, err := ratelimit.New(st, alg, ratelimit.Limit{Name: args[0], Rate: rate, Period: period, Burst: burst}, nil)
				if err != nil {
					return exitErr{code: 2, err: err}
				}
				d, err := l.Peek(ctx, args[1], 1)
				if err != nil {
					return err
				}
				return f.emit(cmd.OutOrStdout(), d, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "LIMIT\tKEY\tALGORITHM\tNEXT REQUEST\tREMAINING\tRETRY AFTER\tFULL AGAIN IN\n")
					next := "allowed"
					if !d.Allowed {
						next = "denied"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d of %d\t%s\t%s\n", d.Limit.Name, args[1], d.Algorithm, next, d.Remaining,
						limitCapacity(d.Algorithm, d.Limit), orDash(durOrEmpty(d.RetryAfter)), orDash(durOrEmpty(d.ResetAfter)))
					fmt.Fprintf(tw, "capacity %d: %s\n", limitCapacity(d.Algorithm, d.Limit), capacityWords(d.Algorithm, d.Limit))
				})
			})
		},
	}
	show.Flags().StringVar(&algorithm, "algorithm", "gcra", "gcra, fixed-window, sliding-log or sliding-window")
	show.Flags().IntVar(&rate, "rate", 0, "requests per period, as the service configures the limit (required)")
	show.Flags().DurationVar(&period, "period", 0, "the limit's period, e.g. 1m (required)")
	show.Flags().IntVar(&burst, "burst", 0, "GCRA burst (default: the rate)")
	show.MarkFlagRequired("rate")
	show.MarkFlagRequired("period")
	cmd.AddCommand(show)
	return cmd
}

// limitCapacity is the most a key can use at once under l: GCRA's bucket
// (Burst), a window's Rate.
func limitCapacity(a ratelimit.Algorithm, l ratelimit.Limit) int {
	if a == ratelimit.GCRA && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// capacityWords says where the capacity comes from.
func capacityWords(a ratelimit.Algorithm, l ratelimit.Limit) string {
	if a == ratelimit.GCRA {
		return fmt.Sprintf("a bucket of %d (burst), refilled at %d per %v", limitCapacity(a, l), l.Rate, l.Period)
	}
	return fmt.Sprintf("%d per %v (%s)", l.Rate, l.Period, a)
}

func durOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.Round(time.Millisecond).String()
}

func newIdempotencyCmd() *cobra.Command {
	var f opsFlags
	cmd := &cobra.Command{
		Use:   "idempotency",
		Short: "Inspect idempotency records and settle those whose outcome is unknown",
		Long:  "Inspect, list and settle idempotency records on a store (list, resolve and release: memory, SQLite, PostgreSQL and Redis).\n\n" + storeHelp,
	}
	f.add(cmd)
	addIdempotencyAdminCmds(cmd, &f)
	cmd.AddCommand(&cobra.Command{
		Use:   "show SCOPE KEY",
		Short: "Show the record of KEY in SCOPE: claimed, completed or unknown; fence; what remains of its retention",
		Long: `Shows the record of KEY in SCOPE. The HTTP middleware's scopes look like
"5:alice POST /orders" (the principal's length, the principal, the route);
the recorded value is shown by size only.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := idempotency.ID{Scope: args[0], Key: args[1]}
			if err := driver.ValidateID(id); err != nil {
				return exitErr{code: 2, err: err}
			}
			return f.with(cmd, func(ctx context.Context, s *storeopen.Stores) error {
				st, err := storeopen.Need(s, s.Idempotency, "idempotency records")
				if err != nil {
					return err
				}
				r, err := st.Inspect(ctx, id)
				if err != nil {
					return err
				}
				if !r.Exists {
					if f.json {
						f.emit(cmd.OutOrStdout(), r, nil)
					}
					return notFound("no record of key %q in scope %q (never written, released, or past its retention)", id.Key, id.Scope)
				}
				return f.emit(cmd.OutOrStdout(), r, func(tw *tabwriter.Writer) {
					st := idempotency.StateInProgress
					switch {
					case r.Completed:
						st = idempotency.StateDone
					case r.ClaimTTL == 0:
						st = idempotency.StateUnknown
					}
					state := idemWords(st, r.Outcome)
					fmt.Fprintf(tw, "SCOPE\tKEY\tSTATE\tFENCE\tCLAIM TTL\tRETAINED FOR\n")
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", strings.ReplaceAll(r.Scope, "\t", " "), r.Key, state, r.Fence,
						orDash(durOrEmpty(r.ClaimTTL)), orDash(durOrEmpty(r.Expires)))
				})
			})
		},
	})
	return cmd
}
