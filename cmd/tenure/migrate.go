package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// migrator is a SQL store's migration surface.
type migrator interface {
	MigrationStatus(ctx context.Context) (pgstore.MigrationStatus, error)
	Migrate(ctx context.Context) error
	MigrateDown(ctx context.Context, to int, force bool) ([]pgstore.Loss, error)
	MigrateDownPlan(ctx context.Context, to int) ([]pgstore.Migration, []pgstore.Loss, error)
}

// migrateFlags are the flags of tenure migrate.
type migrateFlags struct {
	store, dataDir, schema, prefix string
	json                           bool
	timeout                        time.Duration
}

const migrateHelp = `tenure's SQL stores keep their tables at a numbered version recorded in the
database (PostgreSQL: <schema>.tenure_migrations, SQLite:
<prefix>migrations). A service refuses tables at a version it does not run
on, naming both; these commands report, apply and undo the versions.

  tenure migrate status   the recorded version, the pending migrations, and
                          versions applied from another text of their file
  tenure migrate up       apply the pending migrations, in order, once, under
                          a lock (safe from several processes at once)
  tenure migrate down     undo migrations for a rollback (--to N, --dry-run);
                          refused when it would drop fences, ledger rows or
                          revocations, unless --force
  tenure migrate sql      print the migration files resolved for --schema or
                          --table-prefix, for goose, golang-migrate, atlas or psql

Migrations are expand-first: a tenure runs on the schema of its own version
and of the next one, so a rolling upgrade migrates up first and then
replaces the instances, old and new serving side by side meanwhile. A
rollback runs the newer tenure's migrate down first, then starts the older
tenure.

--store selects the store:
  (none)                the embedded default: tenure.db in --data-dir
  sqlite:PATH           a SQLite file (--table-prefix, default "tenure_")
  postgres://…          PostgreSQL (--schema, default "tenure")
Redis, etcd and memory keep no versioned schema: there is nothing to migrate.

Exit status: 0 on success (status: also when migrations are pending), 1
when migrate down is refused for what it would drop, 2 on bad input, a store
that cannot be reached, or a version this tenure does not know.`

func newMigrate() *cobra.Command {
	var f migrateFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Report and apply the SQL stores' schema versions",
		Long:  migrateHelp,
	}
	p := cmd.PersistentFlags()
	p.StringVar(&f.store, "store", "", "store URL (default: the embedded SQLite file in --data-dir)")
	p.StringVar(&f.dataDir, "data-dir", storeopen.DefaultDataDir(), "directory of the embedded default's tenure.db")
	p.StringVar(&f.schema, "schema", pgstore.DefaultSchema, "PostgreSQL schema of tenure's tables")
	p.StringVar(&f.prefix, "table-prefix", sqlitestore.DefaultTablePrefix, "SQLite table name prefix")
	p.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	p.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up after this long")

	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show the recorded schema version and the pending migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.with(cmd, false, func(ctx context.Context, kind storeurl.Kind, m migrator) error {
				st, err := m.MigrationStatus(ctx)
				if err != nil {
					return err
				}
				return emitStatus(cmd.OutOrStdout(), f.json, kind, st)
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply the pending migrations in order (idempotent; safe from several processes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.with(cmd, true, func(ctx context.Context, kind storeurl.Kind, m migrator) error {
				before, err := m.MigrationStatus(ctx)
				if err != nil {
					return err
				}
				if err := m.Migrate(ctx); err != nil {
					return err
				}
				st, err := m.MigrationStatus(ctx)
				if err != nil {
					return err
				}
				if !f.json {
					fmt.Fprintf(cmd.OutOrStdout(), "applied %d migrations (version %d to %d)\n",
						st.Current-before.Current, before.Current, st.Current)
				}
				return emitStatus(cmd.OutOrStdout(), f.json, kind, st)
			})
		},
	})
	var down downFlags
	downCmd := &cobra.Command{
		Use:   "down",
		Short: "Undo migrations for a rollback (refused when it would drop what a guarantee rests on)",
		Long: `Runs the down files of the versions above --to (default: one version below
the schema's), newest first, in one transaction under the migration lock.
Run it with the tenure that applied those versions (its down files are in
it), before starting the older tenure.

Before it changes anything it counts what each down file would drop that a
guarantee rests on: lease rows and their fences, fence guard rows, the
fence floor when it is ahead of the clock, idempotency records, ledger rows
of completed schedule slots, revocations of users' sessions. If any is
there it is refused (exit status 1), naming them, and nothing changes;
--force runs it anyway. --dry-run prints the plan and the counts and
changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("to") && down.to < 0 {
				return exitErr{code: 2, err: fmt.Errorf("--to must be 0 or more, got %d", down.to)}
			}
			return f.with(cmd, false, func(ctx context.Context, kind storeurl.Kind, m migrator) error {
				return runDown(ctx, cmd, kind, f.json, &down, m)
			})
		},
	}
	downCmd.Flags().IntVar(&down.to, "to", 0, "the version to go down to (default: one below the schema's; 0: no tenure tables)")
	downCmd.Flags().BoolVar(&down.dryRun, "dry-run", false, "print what would be undone and dropped, change nothing")
	downCmd.Flags().BoolVar(&down.force, "force", false, "run even when it drops what a guarantee rests on")
	cmd.AddCommand(downCmd)

	var out string
	var downFiles bool
	sqlCmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the migration files resolved for --schema (PostgreSQL) or --table-prefix (SQLite)",
		Long: `Prints every migration file, in order, with the schema name (PostgreSQL) or
table prefix (SQLite) filled in, for teams that apply schema changes with
their own tool or a role with DDL rights. Each file ends with the statement
that records its version, so a service started afterwards accepts the
schema. --down prints the down files instead, newest first (each ends with
the statement that removes its version; another tool runs no guard: count
what each file's tenure:guard-sql comments count first, or use tenure
migrate down). --out DIR writes the up files, NNNN_name.up.sql, into DIR
instead (goose, golang-migrate and atlas read them); with --down, the
NNNN_name.down.sql files too (golang-migrate's layout).
The engine follows --store (postgres://… or sqlite:…; the default is the
embedded SQLite store); nothing is read from the store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := storeurl.Parse(f.store)
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			var up, down fs.FS
			switch spec.Kind {
			case storeurl.Postgres:
				if up, err = pgstore.Migrations(f.schema); err == nil {
					down, err = pgstore.DownMigrations(f.schema)
				}
			case storeurl.SQLite, storeurl.Embedded:
				if up, err = sqlitestore.Migrations(f.prefix); err == nil {
					down, err = sqlitestore.DownMigrations(f.prefix)
				}
			default:
				return exitErr{code: 2, err: fmt.Errorf("%s keeps no versioned schema: there are no migration files", spec.Kind)}
			}
			if err != nil {
				return exitErr{code: 2, err: err}
			}
			return writeMigrations(cmd.OutOrStdout(), up, down, out, downFiles)
		},
	}
	sqlCmd.Flags().StringVar(&out, "out", "", "write the up files (with --down, the down files too) into this directory instead of printing them")
	sqlCmd.Flags().BoolVar(&downFiles, "down", false, "print the down files, newest first (with --out: write them too)")
	cmd.AddCommand(sqlCmd)
	return cmd
}

// writeMigrations prints the up files in order (down: the down files,
// newest first), or writes the up files (down: and the down files) into
// dir.
func writeMigrations(w io.Writer, up, downFS fs.FS, dir string, down bool) error {
	type file struct {
		fsys fs.FS
		name string
	}
	var files []file
	add := func(fsys fs.FS, pattern string, reverse bool) error {
		names, err := fs.Glob(fsys, pattern)
		if err != nil {
			return err
		}
		slices.Sort(names)
		if reverse {
			slices.Reverse(names)
		}
		for _, n := range names {
			files = append(files, file{fsys, n})
		}
		return nil
	}
	switch {
	case dir != "":
		if err := add(up, "*.up.sql", false); err != nil {
			return err
		}
		if down {
			if err := add(downFS, "*.down.sql", false); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return exitErr{code: 2, err: err}
		}
	case down:
		if err := add(downFS, "*.down.sql", true); err != nil {
			return err
		}
	default:
		if err := add(up, "*.up.sql", false); err != nil {
			return err
		}
	}
	for _, f := range files {
		name := f.name
		b, err := fs.ReadFile(f.fsys, name)
		if err != nil {
			return err
		}
		if dir != "" {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return exitErr{code: 2, err: err}
			}
			fmt.Fprintln(w, filepath.Join(dir, name))
			continue
		}
		fmt.Fprintf(w, "-- file: %s\n%s\n", name, b)
	}
	return nil
}

type statusOut struct {
	Store   string   `json:"store"`
	Current int      `json:"current"`
	Latest  int      `json:"latest"`
	Applied []int    `json:"applied"`
	Pending []string `json:"pending"`
	Legacy  bool     `json:"unversioned_tables,omitempty"`
	// Compatible is whether this tenure runs on the schema as it is.
	Compatible bool `json:"compatible"`
	// Drift are the versions built from another text of their file than
	// this tenure's (recorded checksums differ).
	Drift []int `json:"drift"`
}

func emitStatus(w io.Writer, asJSON bool, kind storeurl.Kind, st pgstore.MigrationStatus) error {
	o := statusOut{Store: string(kind), Current: st.Current, Latest: st.Latest, Applied: st.Applied, Pending: []string{}, Legacy: st.Legacy, Compatible: st.Compatible}
	if o.Applied == nil {
		o.Applied = []int{}
	}
	o.Drift = append([]int{}, st.Drift...)
	for _, m := range st.Pending {
		o.Pending = append(o.Pending, m.File)
	}
	f := opsFlags{json: asJSON}
	return f.emit(w, o, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "VERSION\tLATEST\tPENDING\n")
		fmt.Fprintf(tw, "%d\t%d\t%d\n", st.Current, st.Latest, len(st.Pending))
		for _, m := range st.Pending {
			fmt.Fprintf(tw, "pending:\t%s\n", m.File)
		}
		for _, v := range st.Drift {
			fmt.Fprintf(tw, "drift:\tversion %d was applied from another text of its file than this tenure's (`tenure migrate sql` prints this tenure's)\n", v)
		}
		switch {
		case st.Current > st.Latest && st.Compatible:
			fmt.Fprintf(tw, "the schema is at version %d, one newer than this tenure's (version %d): this tenure runs on it; the newer tenure's `migrate down` rolls it back\n", st.Current, st.Latest)
		case st.Current > st.Latest:
			fmt.Fprintf(tw, "the schema is newer (version %d) than this tenure runs on (versions %d to %d): upgrade tenure\n", st.Current, st.Latest, st.Latest+pgstore.SchemaWindow)
		case st.Legacy:
			fmt.Fprintf(tw, "tables created before versions were recorded: `tenure migrate up` adopts them as version 1 and applies the rest\n")
		}
	})
}

// with opens the SQL store --store names for migration, runs fn, and maps
// errors to exit statuses. Only up (create) may create the embedded file.
func (f *migrateFlags) with(cmd *cobra.Command, create bool, fn func(ctx context.Context, kind storeurl.Kind, m migrator) error) error {
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
	var m migrator
	switch spec.Kind {
	case storeurl.Postgres:
		pool, err := pgxpool.New(ctx, spec.URL)
		if err != nil {
			return exitErr{code: 2, err: fmt.Errorf("postgres %s: %w", spec.Redacted(), err)}
		}
		defer pool.Close()
		st, err := pgstore.New(pool, &pgstore.Options{Schema: f.schema})
		if err != nil {
			return exitErr{code: 2, err: err}
		}
		// Keep the leases table's persistence (pgstore.Options.UnloggedLeases)
		// as the service chose it.
		if u, err := st.LeasesUnlogged(ctx); err == nil && u {
			if st, err = pgstore.New(pool, &pgstore.Options{Schema: f.schema, UnloggedLeases: true}); err != nil {
				return exitErr{code: 2, err: err}
			}
		}
		m = st
	case storeurl.SQLite, storeurl.Embedded:
		path := spec.Path
		if spec.Kind == storeurl.Embedded {
			path = storeopen.EmbeddedFile(f.dataDir)
			if create {
				if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
					return exitErr{code: 2, err: err}
				}
			}
		}
		if path == "" {
			return exitErr{code: 2, err: errors.New("sqlite: a file path is needed (sqlite:PATH)")}
		}
		if _, err := os.Stat(path); err != nil && !create {
			return exitErr{code: 1, err: fmt.Errorf("%w at %s: %v", storeopen.ErrNoData, path, err)}
		}
		db, err := sqlitestore.Open(ctx, path, &sqlitestore.Options{TablePrefix: f.prefix, Migrate: sqlitestore.MigrateSkip})
		if err != nil {
			return exitErr{code: 2, err: err}
		}
		defer db.Close()
		m = db
	default:
		fmt.Fprintf(cmd.OutOrStdout(), "%s keeps no versioned schema: nothing to migrate\n", spec.Kind)
		return nil
	}
	if err := fn(ctx, spec.Kind, m); err != nil {
		var e exitErr
		if errors.As(err, &e) {
			return err
		}
		return exitErr{code: 2, err: err}
	}
	return nil
}

// downFlags are the flags of tenure migrate down.
type downFlags struct {
	to            int
	dryRun, force bool
}

type downOut struct {
	Store   string         `json:"store"`
	From    int            `json:"from"`
	To      int            `json:"to"`
	Undo    []string       `json:"undo"`
	Lost    []pgstore.Loss `json:"would_drop"`
	DryRun  bool           `json:"dry_run,omitempty"`
	Refused bool           `json:"refused,omitempty"`
	Forced  bool           `json:"forced,omitempty"`
}

// runDown is tenure migrate down.
func runDown(ctx context.Context, cmd *cobra.Command, kind storeurl.Kind, asJSON bool, d *downFlags, m migrator) error {
	st, err := m.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	to := st.Current - 1
	if cmd.Flags().Changed("to") {
		to = d.to
	}
	if st.Current == 0 {
		return exitErr{code: 2, err: errors.New("the store has no tenure tables: nothing to migrate down")}
	}
	if to > st.Current || to < 0 {
		return exitErr{code: 2, err: fmt.Errorf("--to %d: the schema is at version %d; give a version from 0 to %d", to, st.Current, st.Current-1)}
	}
	plan, lost, err := m.MigrateDownPlan(ctx, to)
	if err != nil {
		return err
	}
	o := downOut{Store: string(kind), From: st.Current, To: to, Undo: []string{}, Lost: lost, DryRun: d.dryRun}
	if o.Lost == nil {
		o.Lost = []pgstore.Loss{}
	}
	for _, mg := range plan {
		o.Undo = append(o.Undo, mg.DownFile)
	}
	w := cmd.OutOrStdout()
	var refusal error
	if !d.dryRun {
		dropped, err := m.MigrateDown(ctx, to, d.force)
		if err != nil {
			if !errors.Is(err, pgstore.ErrDownRefused) {
				return err
			}
			o.Refused, refusal = true, err
		} else {
			// What the run counted in its own transaction, not the plan's.
			o.Lost = append([]pgstore.Loss{}, dropped...)
			o.Forced = d.force && len(dropped) > 0
		}
	}
	if asJSON {
		if err := (&opsFlags{json: true}).emit(w, o, nil); err != nil {
			return err
		}
	} else {
		verb := "undid"
		switch {
		case d.dryRun:
			verb = "would undo"
		case o.Refused:
			verb = "refused to undo"
		}
		fmt.Fprintf(w, "%s %d migrations (version %d to %d)\n", verb, len(plan), st.Current, to)
		for _, mg := range plan {
			fmt.Fprintf(w, "  %s\n", mg.DownFile)
		}
		for _, l := range o.Lost {
			what := "would drop"
			if o.Forced {
				what = "dropped"
			}
			fmt.Fprintf(w, "  version %d %s %d %s\n", l.Version, what, l.Rows, l.What)
		}
	}
	if refusal != nil {
		return exitErr{code: 1, err: fmt.Errorf("%w; --dry-run shows the plan, --force runs it anyway", refusal)}
	}
	return nil
}
