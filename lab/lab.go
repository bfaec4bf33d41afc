// Package lab runs the failure modes tenure closes as experiments against a
// real store, through tenure's public API, with real clocks.
//
// Each experiment prints one line of name=value measurements and a verdict:
// whether it showed what it must. [Run] runs the experiments a
// store supports; cmd/tenure's `lab` command is its front end.
package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// KV is one name=value pair of an experiment's line.
type KV struct {
	Name, Value string
}

// Line formats pairs as "a=1 b=true".
func Line(kvs []KV) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = kv.Name + "=" + kv.Value
	}
	return strings.Join(parts, " ")
}

// Experiment is one scenario: a failure mode and what tenure does about it.
type Experiment struct {
	// Name is the experiment's name.
	Name string
	// Shows says, in a sentence, what the experiment shows and why it
	// matters to a service.
	Shows string
	// Want is the line the experiment must print.
	Want string
	// Supports reports whether env's store can run the experiment; nil
	// means every store can.
	Supports func(env *Env) bool
	// Run performs the experiment and returns its line's values, plus notes
	// (such as which code path a store took) that are printed but not
	// compared.
	Run func(ctx context.Context, env *Env) (values, notes []KV, err error)
}

// Resource is a value behind a store's guards, used by the experiments the
// as a protected business row.
type Resource interface {
	// FencedWrite sets name to value if fence is greater than every fence
	// admitted for name (max-fence guard); else an error wrapping
	// fence.ErrStale.
	FencedWrite(ctx context.Context, name string, fence uint64, value string) error
	// HolderWrite sets name to value only if l is still the current holder
	// of its key on the store's clock (strict holder check, atomic with the
	// write); else an error wrapping lease.ErrNotHeld.
	HolderWrite(ctx context.Context, l *lease.Lease, name, value string) error
	// PlainWrite sets name to value with no check (the negative control).
	PlainWrite(ctx context.Context, name, value string) error
	// Read returns name's value ("" if unset).
	Read(ctx context.Context, name string) (string, error)
}

// Env is one store prepared for the experiments.
type Env struct {
	// Store names the store ("sqlite", "memory", "redis", "postgres", "etcd").
	Store string
	// Detail describes where it is (a file, an address).
	Detail string
	// Leases is the store's lease view.
	Leases lease.Store
	// Resource is a value guarded by this store's guards.
	Resource Resource
	// Ledger is a SQL row guarded by a fence check in the caller's
	// transaction, where fences minted by Leases are admitted (the
	// fence-from-counter experiment). It is the store itself for SQL stores and an
	// embedded SQLite file otherwise.
	Ledger Resource
	// ReleasePath reports how the store's release compares and deletes
	// ("delex", "lua", "sql", "txn", "mutex").
	ReleasePath func(ctx context.Context) (string, error)
	// Prefix makes this run's keys unique.
	Prefix string

	// The store itself, for experiments that use more than leases: exactly
	// one of these is set. Experiments take the views they need from it.
	Mem    *memstore.Store
	SQLite *sqlitestore.Store
	PG     *pgstore.Store
	Redis  *redisstore.Store
	Etcd   *etcdstore.Store

	redis   rueidis.Client // the Redis store's client
	pool    *pgxpool.Pool  // the PostgreSQL store's pool
	closers []func() error
}

// Key returns a key unique to this run.
func (e *Env) Key(name string) string { return e.Prefix + name }

// OnClose registers f to run when the Env is closed.
func (e *Env) OnClose(f func() error) { e.closers = append(e.closers, f) }

// Close releases what the Env opened.
func (e *Env) Close() error {
	var first error
	for i := len(e.closers) - 1; i >= 0; i-- {
		if err := e.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	e.closers = nil
	return first
}

// Result is the outcome of one experiment on one store.
type Result struct {
	Store      string        `json:"store"`
	Experiment string        `json:"experiment"`
	Shows      string        `json:"shows"`
	Line       string        `json:"line"`
	Want       string        `json:"want"`
	Notes      string        `json:"notes,omitempty"`
	OK         bool          `json:"ok"`
	Error      string        `json:"error,omitempty"`
	Duration   time.Duration `json:"duration_ns"`
}

// Experiments returns every experiment, in their documented order.
func Experiments() []Experiment {
	exps := slices.Clone(all)
	rank := func(e Experiment) int {
		if i := slices.Index(labOrder, e.Name); i >= 0 {
			return i
		}
		return len(labOrder)
	}
	slices.SortStableFunc(exps, func(a, b Experiment) int { return rank(a) - rank(b) })
	return exps
}

// labOrder is the documented order of the experiments.
var labOrder = []string{
	"fence-rejects-stale", "max-fence-is-ttl-blind", "unconditional-write-overwrites",
	"slot-once", "failed-slot-retries", "session-late-save", "session-absolute-deadline",
	"redis-release", "fixed-lease-expires", "keepalive-holds", "fixed-window-script",
	"delex-release", "lua-release", "fence-from-counter", "idempotent-receipt",
	"fixed-window-concurrent", "session-expiry",
}

var all []Experiment

func register(e ...Experiment) { all = append(all, e...) }

// Options select and present experiments.
type Options struct {
	// Only runs the experiments with these names (all when empty).
	Only []string
	// JSON prints one JSON object per result instead of text.
	JSON bool
	// Out receives the report; nil means no output.
	Out io.Writer
}

// Run runs the selected experiments on each Env, concurrently within an Env
// (several of them wait for real leases to expire), and reports each
// result as it finishes in the documented order. It returns every result; an
// unknown name in Only is an error and runs nothing.
func Run(ctx context.Context, envs []*Env, o *Options) ([]Result, error) {
	if o == nil {
		o = &Options{}
	}
	exps, err := Lookup(o.Only)
	if err != nil {
		return nil, err
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	var results []Result
	for _, env := range envs {
		if !o.JSON {
			fmt.Fprintf(out, "store %s (%s)\n", env.Store, env.Detail)
		}
		var runnable []Experiment
		for _, e := range exps {
			if supported(env, e) {
				runnable = append(runnable, e)
			} else if !o.JSON {
				fmt.Fprintf(out, "  %-4s %-31s not supported by this store\n", "-", e.Name)
			}
		}
		rs := make([]Result, len(runnable))
		done := make([]chan struct{}, len(runnable))
		var wg sync.WaitGroup
		for i, e := range runnable {
			done[i] = make(chan struct{})
			wg.Go(func() {
				defer close(done[i])
				rs[i] = runOne(ctx, env, e)
			})
		}
		for i := range runnable {
			<-done[i]
			report(out, rs[i], o.JSON)
		}
		wg.Wait()
		results = append(results, rs...)
	}
	if !o.JSON {
		failed := 0
		for _, r := range results {
			if !r.OK {
				failed++
			}
		}
		fmt.Fprintf(out, "%d experiments, %d ok, %d failed\n", len(results), len(results)-failed, failed)
	}
	return results, nil
}

// Lookup returns the experiments with the given names, in that order (all of
// them when names is empty); an unknown name is an error.
func Lookup(only []string) ([]Experiment, error) {
	if len(only) == 0 {
		return Experiments(), nil
	}
	var exps []Experiment
	for _, name := range only {
		i := slices.IndexFunc(all, func(e Experiment) bool { return e.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, e := range all {
				names[j] = e.Name
			}
			return nil, fmt.Errorf("lab: no experiment %q (have %s)", name, strings.Join(names, ", "))
		}
		exps = append(exps, all[i])
	}
	return exps, nil
}

func supported(env *Env, e Experiment) bool {
	return e.Supports == nil || e.Supports(env)
}

func runOne(ctx context.Context, env *Env, e Experiment) Result {
	start := time.Now()
	r := Result{Store: env.Store, Experiment: e.Name, Shows: e.Shows, Want: e.Want}
	values, notes, err := e.Run(ctx, env)
	r.Duration = time.Since(start)
	r.Line = Line(values)
	r.Notes = Line(notes)
	if err != nil {
		r.Error = err.Error()
	}
	r.OK = err == nil && r.Line == e.Want
	return r
}

func report(out io.Writer, r Result, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(out, "%s\n", b)
		return
	}
	verdict := "ok"
	if !r.OK {
		verdict = "FAIL"
	}
	line := r.Line
	if r.Notes != "" {
		line += "  (" + r.Notes + ")"
	}
	fmt.Fprintf(out, "  %-4s %-31s %s\n", verdict, r.Experiment, line)
	if !r.OK {
		if r.Error != "" {
			fmt.Fprintf(out, "  %-4s %-31s error: %s\n", "", "", r.Error)
		}
		fmt.Fprintf(out, "  %-4s %-31s want:  %s\n", "", "", r.Want)
	}
}
