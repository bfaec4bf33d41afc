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

	"github.com/tenurekit/tenure/cmd/tenure/internal/doctor"
	"github.com/tenurekit/tenure/internal/storeurl"
)

// errUnsafe makes the command exit non-zero after it printed its report.
var errUnsafe = errors.New("doctor: the store is configured unsafely (see the findings marked unsafe)")

func newDoctor() *cobra.Command {
	var (
		store     string
		asJSON    bool
		schema    string
		maxOffset time.Duration
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a store's configuration for what would break tenure's guarantees",
		Long: `Checks the store --store names and says what is unsafe, with the fix:

  Redis       maxmemory-policy (an evicting server drops locks and fences),
              persistence and appendfsync, DELEX support, Cluster state,
              clock offset
  PostgreSQL  version, time zone, synchronous_commit and fsync, the schema,
              clock offset
  etcd        member status and alarms, a leader, the minimum lease TTL
  SQLite      journal mode (WAL), busy timeout, synchronous, the schema;
              sqlite:PATH is checked as tenure opens it, sqlite:PATH?PARAMS
              with your DSN parameters; the file is never created

The report's first line names the store and this tenure's version; --json
gives the version as its "version" member, the object tenure version --json
prints.

Exit status: 0 when nothing is unsafe (warnings included), 1 when something
is unsafe, 2 when the store could not be reached or asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := storeurl.Parse(store)
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			if timeout <= 0 {
				return exitErr{code: 2, err: fmt.Errorf("--timeout must be positive, got %v", timeout)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rep, err := doctor.Run(ctx, spec, &doctor.Options{MaxClockOffset: maxOffset, Schema: schema})
			ver := currentVersion()
			if asJSON {
				out := struct {
					doctor.Report
					Unsafe  bool        `json:"unsafe"`
					Error   string      `json:"error,omitempty"`
					Version versionInfo `json:"version"`
				}{Report: rep, Unsafe: rep.Unsafe(), Version: ver}
				if err != nil {
					out.Error = err.Error()
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(out)
			} else {
				printReport(cmd.OutOrStdout(), rep, ver)
			}
			switch {
			case err != nil:
				return exitErr{code: 2, err: err}
			case rep.Unsafe():
				return exitErr{code: 1, err: errUnsafe}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL (memory, sqlite:PATH, redis://…, postgres://…, etcd://…)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&schema, "schema", "tenure", "PostgreSQL schema of tenure's tables")
	cmd.Flags().DurationVar(&maxOffset, "max-clock-offset", time.Second, "clock offset from the store above which to warn")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

func printReport(w io.Writer, r doctor.Report, v versionInfo) {
	fmt.Fprintf(w, "%s at %s, checked by %s\n\n", r.Store, r.Target, v.Short())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(f.Status)), f.Check, f.Detail)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	tw.Flush()
	if r.Unsafe() {
		fmt.Fprintln(w, "\nunsafe: fix the findings marked UNSAFE before relying on this store")
	}
}
