package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/proof"
)

// A tenure binary started by `tenure proof` as one of its workers runs the
// worker and nothing else.
func init() {
	if proof.IsWorker() {
		os.Exit(proof.WorkerMain())
	}
}

func newProof() *cobra.Command {
	var (
		store     string
		workloads []string
		duration  time.Duration
		workers   int
		ttl       time.Duration
		asJSON    bool
		list      bool
		dir       string
		seed      uint64
		quiet     bool
		faults    []string
		delay     time.Duration
		start     string
		keys      int
	)
	cmd := &cobra.Command{
		Use:   "proof",
		Short: "Run fault-injection workloads against a store and count what was lost",
		Long: `Runs workloads against a real store in separate worker processes (this
binary, started again), injects faults, records every operation's invocation
and completion, checks the history and prints a report per workload:
attempts, acknowledged, indeterminate, lost, stale writes admitted,
duplicates, errors by kind and the faults injected.

Each workload runs beside its control: the same steps without tenure's guard
or fence check, under the same faults. The control must show a violation in
the same run; if it does not, the faults did not bite and the run is reported
as inconclusive, not as a pass. Operations whose outcome is unknown (a
timeout, a dropped reply, a killed worker) are kept as indeterminate and
never counted as acknowledged.

Workloads:
` + workloadList() + `
Faults (--fault, a comma-separated list; default pause,kill,forget):
  pause     workers are paused with SIGSTOP for longer than the lease TTL and
            resumed (the memory store lives in one process: its workers are
            goroutines and pauses are acted out between their steps); in
            lease-counter and fenced-register every other pause is aimed:
            a holder paused as soon as it is granted the lease, until the
            lease has passed to the next holder or that holder has written
  kill      the schedule workload's workers are killed with SIGKILL and
            started again
  forget    in lease-counter, every TTL or so the store loses the records
            of the run's ended leases, fences included, as a restore from
            an older copy or a restart without persistence would (the
            run's own keys only; nothing on etcd, whose fences are
            revisions); a new grant's fence must still exceed every
            earlier one
  proxy     workers reach the store (Redis, PostgreSQL or etcd at one
            address; not Redis Cluster) through a TCP proxy on 127.0.0.1
            that delays replies by --proxy-delay, cuts every connection,
            or black-holes replies (requests still take effect), for one to
            two TTLs at a time; in lease-counter and fenced-register it
            also holds a holder's connections until its lease has passed on
  restart   the store is killed (SIGKILL) and restarted once, halfway
            through each workload; only for a store this command started
            itself (--start-store)
  failover  the store this command started (--start-store redis) gets a
            replica; once, halfway through each workload, the replica's
            replication stream is held back while its link stays up, the
            primary is killed (SIGKILL), the replica promoted (REPLICAOF NO
            ONE) and the workers' address switched to it: what the primary
            wrote since is lost, so a write reported done before must have
            been confirmed by the replica (tenure's default); once per run,
            so with one workload only, and not with restart
The proxy, restart and failover faults are destructive: they disturb every client of
the server, so use them on servers of your own. Faults are counted by kind
in the report.

--store selects the store:
  (none)                the embedded default: a SQLite file in a temp dir, and memory
  memory                the in-process store
  sqlite:PATH           a SQLite file
  redis://HOST:PORT     Redis or Redis Cluster
  postgres://…          PostgreSQL (uses the schema tenure_lab)
  etcd://HOST:PORT[,…]  etcd (the lease workloads: lease-counter, election, fenced-register)

--duration is per workload and store: ten workloads at 10s are at least 100s,
plus the few seconds each takes to start, settle and check. The run prints
its plan and total first, and each workload's verdict as [i/n] when it ends.

Exit status: 0 when every workload passed (or was skipped for the store), 1
on any violation, inconclusive run or error. Histories that fail the
linearizability check are visualized as HTML files under --dir.

A long run, for instance:
  tenure proof --store redis://127.0.0.1:6379 --duration 2m
With store faults:
  tenure proof --start-store redis --fault pause,kill,forget,proxy,restart --duration 1m
  tenure proof --start-store redis --fault pause,failover --workload lease-counter`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if list {
				for _, w := range proof.Workloads() {
					fmt.Fprintf(out, "%-16s %s\n", w.Name, w.Summary)
				}
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			var prog io.Writer = cmd.ErrOrStderr()
			if quiet {
				prog = nil
			}
			f, err := parseFaults(faults)
			if err != nil {
				return err
			}
			f.ProxyDelay = delay
			if start != "" {
				if store != "" {
					return fmt.Errorf("%w: --store and --start-store exclude each other", proof.ErrInvalid)
				}
				if f.Failover != nil && f.Restart != nil {
					return fmt.Errorf("%w: --fault failover and restart exclude each other", proof.ErrInvalid)
				}
				if f.Failover != nil && len(workloads) != 1 {
					return fmt.Errorf("%w: --fault failover fails the store over once: pick one --workload", proof.ErrInvalid)
				}
				s, err := proof.StartStoreWith(ctx, start, proof.StartOptions{Replica: f.Failover != nil})
				if err != nil {
					return err
				}
				defer s.Close()
				store = s.URL
				if prog != nil {
					fmt.Fprintf(prog, "proof: %s\n", s.Detail)
				}
				if f.Restart != nil {
					f.Restart = s.Restart
				}
				if f.Failover != nil {
					f.Failover = s.Failover
				}
			} else if f.Restart != nil || f.Failover != nil {
				return fmt.Errorf("%w: --fault restart and failover need a store this command starts (--start-store redis)", proof.ErrInvalid)
			}
			results, err := proof.Run(ctx, proof.Options{
				Store: store, Workloads: workloads, Duration: duration, Workers: workers, TTL: ttl,
				Progress: prog, Dir: dir, Seed: seed, Faults: f, Keys: keys,
			})
			if err != nil {
				return err
			}
			if asJSON {
				err = proof.WriteJSON(out, results)
			} else {
				err = proof.WriteText(out, results)
			}
			if err != nil {
				return err
			}
			if proof.Failed(results) {
				return errors.New("proof: a workload showed a violation, was inconclusive or could not run")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", "", "store URL (default: embedded SQLite file and memory)")
	f.StringArrayVar(&workloads, "workload", nil, "run only this workload (repeatable; default all)")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long each workload runs under faults (per workload: the total is printed first)")
	f.IntVar(&workers, "workers", 3, "worker processes per workload")
	f.DurationVar(&ttl, "ttl", 0, "lease and claim TTL (default 300ms, 2s on etcd)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	f.BoolVar(&list, "list", false, "list the workloads")
	f.StringVar(&dir, "dir", "", "where to write visualizations of failing histories (default: a new temp dir)")
	f.Uint64Var(&seed, "seed", 0, "seed of the nemesis's choices (default random)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	f.StringSliceVar(&faults, "fault", []string{"pause", "kill", "forget"}, "faults to inject: pause, kill, forget, proxy, restart, failover (comma-separated)")
	f.DurationVar(&delay, "proxy-delay", 50*time.Millisecond, "how long the proxy holds back each reply while it delays them")
	f.StringVar(&start, "start-store", "", "start a store server for the run and use it (redis: redis-server from PATH, persistent, on a free loopback port)")
	f.IntVar(&keys, "keys", 0, "counters per mode in lease-counter, each under its own lease (default 2, 32 on etcd)")
	return cmd
}

// parseFaults turns --fault values into proof.Faults. Restart and Failover
// are set to placeholders that the caller replaces with the started
// store's.
func parseFaults(list []string) (proof.Faults, error) {
	f := proof.Faults{NoPause: true, NoKill: true, NoForget: true}
	for _, v := range list {
		switch strings.TrimSpace(v) {
		case "pause":
			f.NoPause = false
		case "kill":
			f.NoKill = false
		case "forget":
			f.NoForget = false
		case "proxy":
			f.Proxy = true
		case "restart":
			f.Restart = func(context.Context) error { return nil }
		case "failover":
			f.Failover = func(context.Context) error { return nil }
		case "":
		default:
			return f, fmt.Errorf("%w: unknown fault %q (have pause, kill, forget, proxy, restart, failover)", proof.ErrInvalid, v)
		}
	}
	if f.NoPause && f.NoKill && f.NoForget && !f.Proxy && f.Restart == nil && f.Failover == nil {
		return f, fmt.Errorf("%w: --fault names no fault", proof.ErrInvalid)
	}
	return f, nil
}

func workloadList() string {
	var b strings.Builder
	for _, w := range proof.Workloads() {
		fmt.Fprintf(&b, "  %-16s %s\n", w.Name, w.Summary)
	}
	return b.String()
}
