package proof

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/faultproxy"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lab"
)

// ErrInvalid reports bad options: an unknown workload, a duration out of
// range. Nothing was run.
var ErrInvalid = errors.New("proof: invalid argument")

// Options configure [Run].
type Options struct {
	// Store is a --store value (see package storeurl). "" is the embedded
	// default: a SQLite file in a temporary directory, and memory.
	Store string
	// Workloads to run; empty means every workload the store supports.
	Workloads []string
	// Duration is how long each workload runs under faults. Default 10s;
	// 1s to 24h.
	Duration time.Duration
	// Workers is the number of worker processes per workload. Default 3;
	// 2 to 16.
	Workers int
	// TTL is the lease and claim time the workloads use. Default 300ms
	// (2s on etcd, whose minimum lease is about that); 50ms to 1m.
	TTL time.Duration
	// Exe and Args start a worker: the binary is run with Args and the
	// environment variable WorkerEnv. Default: this executable, no
	// arguments (its main must call IsWorker and WorkerMain).
	Exe  string
	Args []string
	// Progress receives one line per phase and about one per second while
	// a workload runs. Nil means none.
	Progress io.Writer
	// Dir receives failing histories and their visualizations. Default:
	// a new temporary directory, created only when something is written.
	Dir string
	// Seed makes the nemesis's choices repeatable; 0 picks one at random.
	Seed uint64
	// CheckTimeout bounds each linearizability check (porcupine); a
	// check that runs out counts as passed and says so in the errors.
	// Default 1m.
	CheckTimeout time.Duration
	// Keys is the number of counters per mode in lease-counter, each
	// under a lease of its own that every worker contends for. Default 2,
	// and 32 on etcd, whose minimum TTL of about 2s makes one counter
	// slow; 1 to 64.
	Keys int
	// Faults enables store-level faults on top of the worker pauses and
	// kills; each is destructive and opt-in.
	Faults Faults
}

// Faults are the store-level faults Run can inject. They need a store the
// run can control, so they are available only where noted.
type Faults struct {
	// NoPause and NoKill turn off the worker faults that are on by
	// default: pausing workers (SIGSTOP) past the TTL, and killing them
	// (SIGKILL) and starting them again in the workloads that allow it.
	NoPause, NoKill bool
	// NoForget turns off the forget fault, on by default in the
	// workloads that allow it (lease-counter): every TTL or so the store
	// loses the records of the run's ended leases, fences included, as a
	// restore from an older copy or a restart without persistence would
	// (the run's own keys only; on etcd, whose fences are revisions, it
	// does nothing). A new grant's fence must still exceed every earlier
	// one.
	NoForget bool
	// Proxy puts a TCP proxy on 127.0.0.1 between the workers and a
	// Redis, PostgreSQL or etcd server (one address; not Redis Cluster);
	// the nemesis delays its replies by ProxyDelay, cuts it (connections
	// reset, new ones refused) and black-holes it (requests reach the
	// server, replies are dropped) for one to two TTLs at a time. The
	// coordinator's own connection, which reads the final state, goes
	// around it. On SQLite and memory it does nothing.
	Proxy bool
	// Restart stops and restarts the store once, halfway through each
	// workload. The command sets it for a store it started itself (see
	// StartStore); tests set it for servers they control.
	Restart func(ctx context.Context) error
	// Failover replaces the store's server by another one once, halfway
	// through each workload (a replica promoted after its primary was
	// killed); the workers must reach the new server at the address they
	// use (through a proxy that switches over).
	Failover func(ctx context.Context) error
	// ProxyDelay is how long the proxy holds back each reply while it
	// delays them. Default 50ms; at most 10s.
	ProxyDelay time.Duration
}

// Result is one workload on one store.
type Result struct {
	Workload string `json:"workload"`
	Store    string `json:"store"`
	// Detail says where the store is and how the workers ran.
	Detail   string        `json:"detail"`
	Duration time.Duration `json:"duration_ns"`
	Workers  int           `json:"workers"`
	// Faults counts the faults injected, by kind.
	Faults map[string]int `json:"faults"`
	// Guarded is the workload through tenure's guards; Control is the
	// same workload without them, under the same faults.
	Guarded ModeResult `json:"guarded"`
	Control ModeResult `json:"control"`
	// Verdict is "pass" (the guarded run showed no violation and the
	// control did), "fail" (the guarded run showed one), "inconclusive"
	// (the control showed none: the faults did not bite, so the guarded
	// run's silence proves nothing; or the guarded run acknowledged no
	// operation at all) or "skipped".
	Verdict string `json:"verdict"`
	// Note explains a skip or how the run was done.
	Note string `json:"note,omitempty"`
	// Files lists files written for a failing check (history,
	// visualization).
	Files []string `json:"files,omitempty"`
	// Error is set when the run itself failed.
	Error string `json:"error,omitempty"`
}

// Verdicts.
const (
	VerdictPass         = "pass"
	VerdictFail         = "fail"
	VerdictInconclusive = "inconclusive"
	VerdictSkipped      = "skipped"
	VerdictError        = "error"
)

// ModeResult counts what one mode of a workload did and lost.
type ModeResult struct {
	// Attempts is the number of operations that change state and were
	// invoked (writes, requests, saves, admissions, slot runs).
	Attempts int `json:"attempts"`
	// Acknowledged were reported successful to their caller.
	Acknowledged int `json:"acknowledged"`
	// Indeterminate may or may not have taken effect; they are never
	// counted as acknowledged.
	Indeterminate int `json:"indeterminate"`
	// Lost are acknowledged effects missing from the final state.
	Lost int `json:"lost"`
	// StaleAdmitted are writes admitted although based on a tenure or a
	// state that was no longer current.
	StaleAdmitted int `json:"stale_admitted"`
	// Duplicates are effects that happened more than once (or answers
	// that differ for one key).
	Duplicates int `json:"duplicates"`
	// Errors counts the operations that did not succeed, by kind.
	Errors map[string]int `json:"errors"`
	// FenceRegressions counts lease grants whose fence was not above the
	// fence of a grant that completed before they were requested.
	FenceRegressions int `json:"fence_regressions"`
	// OlderFenceAdmitted counts writes acknowledged with a fence below
	// that of a write acknowledged before they were invoked: what a
	// resource-side guard refuses.
	OlderFenceAdmitted int `json:"older_fence_admitted"`
	// Linearizable is the porcupine check's answer where one applies.
	Linearizable *bool `json:"linearizable,omitempty"`
	// Violations describes the first few violations found.
	Violations []string `json:"violations,omitempty"`
	// Count is the total number of violations.
	Count int `json:"violation_count"`
	// Succession is how soon new leaders followed the terms that ended,
	// in the election workload's guarded run (nil elsewhere).
	Succession *Succession `json:"succession,omitempty"`
}

// Succession measures the election workload's liveness: for each term
// whose end it judged, the time from that end to the next leader's grant.
// A term ends when its leader resigns (the resignation's reply), or when
// its leader went down plus a TTL (the latest the store can keep a term
// that is not renewed).
type Succession struct {
	// Deaths and Resignations count the judged terms that ended with
	// their leader going down, and with a resignation.
	Deaths       int `json:"deaths"`
	Resignations int `json:"resignations"`
	// AfterDeath and AfterResignation are the longest times from such an
	// end to the next grant.
	AfterDeath       time.Duration `json:"after_death_ns"`
	AfterResignation time.Duration `json:"after_resignation_ns"`
	// AllowanceDeath and AllowanceResignation are the allowances those
	// longest times were judged against (see the workload's description).
	AllowanceDeath       time.Duration `json:"allowance_death_ns"`
	AllowanceResignation time.Duration `json:"allowance_resignation_ns"`
}

// add counts one judged term's end: how it ended ("went down" or
// "resigned"), how long after it the next grant came, and its allowance.
func (s *Succession) add(how string, took, allow time.Duration) {
	if how == "went down" {
		s.Deaths++
		if took >= s.AfterDeath {
			s.AfterDeath, s.AllowanceDeath = took, allow
		}
		return
	}
	s.Resignations++
	if took >= s.AfterResignation {
		s.AfterResignation, s.AllowanceResignation = took, allow
	}
}

func (m *ModeResult) violate(format string, args ...any) {
	m.Count++
	if len(m.Violations) < 5 {
		m.Violations = append(m.Violations, fmt.Sprintf(format, args...))
	}
}

// countOps fills Attempts, Acknowledged, Indeterminate and Errors from
// ops.
func (m *ModeResult) countOps(ops []Op) {
	if m.Errors == nil {
		m.Errors = map[string]int{}
	}
	for _, op := range ops {
		m.Attempts++
		switch op.Status {
		case OK:
			m.Acknowledged++
		case Unknown:
			m.Indeterminate++
			m.Errors[op.Err]++
		default:
			m.Errors[op.Err]++
		}
	}
}

// workload is one proof workload.
type workload struct {
	name    string
	summary string
	// supports says why a store cannot run the workload ("" if it can).
	supports func(k storeurl.Kind) string
	// setup prepares tables on the coordinator before workers start.
	setup func(ctx context.Context, w *workerEnv) error
	// worker runs one worker's guarded and control loops until ctx ends.
	worker func(ctx context.Context, w *workerEnv) error
	// check judges the history of one mode, reading the final state
	// through w.
	check func(ctx context.Context, w *workerEnv, r *runInfo, h *History, mode string) ModeResult
	// kills: the nemesis also kills and restarts workers.
	kills bool
	// aim: the workload's holders record "acquire" (with the lease's
	// validity end as output) and "write" operations on the lease's key,
	// and the nemesis also makes targeted pauses: a holder paused as soon
	// as it is granted the lease, before its write, and resumed only once
	// the lease has passed to the next holder, or once the next holder has
	// written too. aimAt says which: "grant", "write" or both.
	aim   bool
	aimAt []string
	// leaseKeys, if set, are the run's lease keys, whose ended leases the
	// forget fault makes the store lose.
	leaseKeys func(w *workerEnv) []string
	// settle is how long the workers run without faults at the end, at
	// least.
	settle func(ttl time.Duration) time.Duration
	// settled, if set, reports whether the workers have finished the work
	// of the run (nil error: it could tell): after settle, they run on
	// until it says so or the check timeout passes, so that work a loaded
	// machine made late is judged once done, not counted lost.
	settled func(ctx context.Context, w *workerEnv, r *runInfo) (bool, error)
}

// runInfo is what a check knows about the run.
type runInfo struct {
	start, faultsEnd, end time.Time
	ttl                   time.Duration
	dir                   string
	name                  string
	checkTimeout          time.Duration
	files                 []string
	// workers is the number of worker slots; downs are the spans in which
	// the nemesis kept a slot (or all of them) from the store.
	workers int
	downs   []downSpan
	// stalls are the spans in which the machine held the nemesis's clock
	// back (see stalled).
	stalls []downSpan
	// stopping is when the workers were told to stop: no new work starts
	// after it.
	stopping time.Time
}

// stalled returns how much of [from, to] the machine held the nemesis's
// clock back: a measure of how loaded it was then.
func (ri *runInfo) stalled(from, to time.Time) time.Duration {
	var sum time.Duration
	for _, s := range ri.stalls {
		a, b := max(s.from.UnixNano(), from.UnixNano()), min(s.to.UnixNano(), to.UnixNano())
		if a < b {
			sum += time.Duration(b - a)
		}
	}
	return sum
}

var workloads []*workload

// order is the order in which workloads run and are listed.
var order = []string{"lease-counter", "election", "fenced-register", "idempotency", "schedule", "session", "session-saves", "session-commit", "ratelimit", "permits"}

func register(w *workload) {
	workloads = append(workloads, w)
	slices.SortStableFunc(workloads, func(a, b *workload) int {
		return slices.Index(order, a.name) - slices.Index(order, b.name)
	})
}

func lookup(name string) *workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	return nil
}

// Workload describes one workload for listings.
type Workload struct {
	Name, Summary string
}

// Workloads lists the workloads in the order they run.
func Workloads() []Workload {
	out := make([]Workload, len(workloads))
	for i, w := range workloads {
		out[i] = Workload{w.name, w.summary}
	}
	return out
}

// target is one store a run goes to.
type target struct {
	name      string // sqlite, memory, redis, postgres, etcd
	url       string // what workers open
	kind      storeurl.Kind
	detail    string
	inProcess bool
}

// targets resolves a --store value.
func targets(spec, tmp string) ([]target, error) {
	u, err := storeurl.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch u.Kind {
	case storeurl.Embedded:
		p := filepath.Join(tmp, "tenure.db")
		return []target{
			{name: "sqlite", url: "sqlite:" + p, kind: storeurl.SQLite, detail: p},
			{name: "memory", url: "memory", kind: storeurl.Memory, detail: "in-process", inProcess: true},
		}, nil
	case storeurl.Memory:
		return []target{{name: "memory", url: "memory", kind: storeurl.Memory, detail: "in-process", inProcess: true}}, nil
	case storeurl.SQLite:
		return []target{{name: "sqlite", url: spec, kind: u.Kind, detail: u.Path}}, nil
	}
	return []target{{name: string(u.Kind), url: spec, kind: u.Kind, detail: u.Redacted()}}, nil
}

// defaults fills in o's defaults and checks its ranges.
func defaults(o Options) (Options, error) {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Duration < time.Second || o.Duration > 24*time.Hour {
		return o, fmt.Errorf("%w: duration %v is not between 1s and 24h", ErrInvalid, o.Duration)
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.Workers < 2 || o.Workers > 16 {
		return o, fmt.Errorf("%w: %d workers is not between 2 and 16", ErrInvalid, o.Workers)
	}
	if o.TTL != 0 && (o.TTL < 50*time.Millisecond || o.TTL > time.Minute) {
		return o, fmt.Errorf("%w: TTL %v is not between 50ms and 1m", ErrInvalid, o.TTL)
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = time.Minute
	}
	if o.CheckTimeout < 0 {
		return o, fmt.Errorf("%w: check timeout %v is negative", ErrInvalid, o.CheckTimeout)
	}
	if o.Faults.ProxyDelay == 0 {
		o.Faults.ProxyDelay = 50 * time.Millisecond
	}
	if o.Faults.ProxyDelay < 0 || o.Faults.ProxyDelay > 10*time.Second {
		return o, fmt.Errorf("%w: proxy delay %v is not between 0 and 10s", ErrInvalid, o.Faults.ProxyDelay)
	}
	if o.Keys < 0 || o.Keys > 64 {
		return o, fmt.Errorf("%w: %d keys is not between 1 and 64", ErrInvalid, o.Keys)
	}
	for _, n := range o.Workloads {
		if lookup(n) == nil {
			names := make([]string, len(workloads))
			for i, w := range workloads {
				names[i] = w.name
			}
			return o, fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalid, n, strings.Join(names, ", "))
		}
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, err
		}
		o.Exe = exe
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	return o, nil
}

// Run runs the workloads on the store o names and returns one Result per
// workload and store. Its error is for a run that could not be done at
// all (bad options, a store that cannot be opened); violations are in the
// Results.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o, err := defaults(o)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "tenure-proof-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ts, err := targets(o.Store, tmp)
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(os.TempDir(), "tenure-proof-"+crand.Text()[:8])
	}
	type planned struct {
		t  target
		wl *workload
	}
	var plan []planned
	runs := 0
	for _, t := range ts {
		for _, wl := range workloads {
			if len(o.Workloads) > 0 && !slices.Contains(o.Workloads, wl.name) {
				continue
			}
			plan = append(plan, planned{t, wl})
			if wl.supports(t.kind) == "" {
				runs++
			}
		}
	}
	progress(o.Progress, "%d workload runs, %v under faults each: at least %v in all, plus the time each run takes to start its workers, settle and check its history (usually seconds)",
		runs, o.Duration, time.Duration(runs)*o.Duration)
	var results []Result
	for i, p := range plan {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		r := runOne(ctx, o, p.wl, p.t, tmp)
		progress(o.Progress, "[%d/%d] %s on %s: %s%s", i+1, len(plan), p.wl.name, p.t.name, r.Verdict, noteSuffix(r))
		results = append(results, r)
	}
	return results, nil
}

func noteSuffix(r Result) string {
	if r.Error != "" {
		return " (" + r.Error + ")"
	}
	if r.Verdict == VerdictSkipped {
		return " (" + r.Note + ")"
	}
	return ""
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "proof: "+format+"\n", args...)
	}
}

// runOne runs wl on t: workers, nemesis, checks.
func runOne(ctx context.Context, o Options, wl *workload, t target, tmp string) Result {
	r := Result{Workload: wl.name, Store: t.name, Detail: t.detail, Workers: o.Workers, Faults: map[string]int{}}
	if why := wl.supports(t.kind); why != "" {
		r.Verdict, r.Note = VerdictSkipped, why
		return r
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = 300 * time.Millisecond
		if t.kind == storeurl.Etcd {
			ttl = 2 * time.Second
		}
	}
	fail := func(err error) Result {
		r.Verdict, r.Error = VerdictError, err.Error()
		return r
	}
	prefix := "proof/" + wl.name + "/" + crand.Text()[:10] + "/"
	ledger := filepath.Join(tmp, "ledger-"+crand.Text()[:8]+".db")
	if t.kind == storeurl.SQLite {
		ledger = strings.TrimPrefix(strings.TrimPrefix(t.url, "sqlite:"), "//")
	}
	keys := o.Keys
	if keys == 0 {
		keys = 2
		if t.kind == storeurl.Etcd {
			keys = 32
		}
	}
	spec := workerSpec{Workload: wl.name, Store: t.url, Prefix: prefix, Ledger: ledger, TTL: ttl, Think: ttl / 5, Keys: keys}
	// The coordinator's own connection: setup, final reads, and for
	// memory the store the worker goroutines share.
	var base *workerEnv
	var err error
	if t.inProcess {
		env, err := lab.OpenMemory(prefix)
		if err != nil {
			return fail(err)
		}
		base = &workerEnv{spec: spec, env: env, kind: t.kind, gate: newGate()}
		base.closer = append(base.closer, func() { env.Close() })
		if err := base.openExtras(ctx, storeurl.Spec{Kind: storeurl.Memory}); err != nil {
			base.close()
			return fail(err)
		}
	} else if base, err = openWorker(ctx, spec, func(Event) {}); err != nil {
		return fail(err)
	}
	defer base.close()
	if wl.setup != nil {
		if err := wl.setup(ctx, base); err != nil {
			return fail(err)
		}
	}
	if o.Faults.Proxy && (t.kind == storeurl.SQLite || t.kind == storeurl.Memory) {
		r.Detail += "; no proxy faults (the store is not reached over TCP)"
	}
	var px *faultproxy.Proxy
	if o.Faults.Proxy && t.kind != storeurl.SQLite && t.kind != storeurl.Memory {
		px, spec.Store, err = proxied(ctx, t)
		if err != nil {
			return fail(err)
		}
		defer px.Close()
		r.Detail += fmt.Sprintf("; workers reach the store through a proxy on %s that delays replies by %v, cuts connections and black-holes replies", px.Addr(), o.Faults.ProxyDelay)
	}
	if t.inProcess {
		r.Detail += "; workers are goroutines of this process and pauses are acted out between their steps (the memory store cannot be shared by processes)"
	} else {
		r.Detail += "; workers are processes"
		if !o.Faults.NoPause {
			r.Detail += ", paused with SIGSTOP"
		}
		if wl.kills && !o.Faults.NoKill {
			r.Detail += ", killed with SIGKILL"
		}
	}
	b := newBuilder()
	hold := newHolders(wl.aim && (!o.Faults.NoPause || px != nil))
	sink := func(e Event) {
		hold.observe(e)
		b.add(e)
	}
	start := time.Now()
	spec.Start = start.UnixNano()
	spec.End = start.Add(o.Duration).UnixNano()
	members := make([]*member, o.Workers)
	startMember := func(i, inc int) (*member, error) {
		s := spec
		s.Index = i
		s.Proc = fmt.Sprintf("w%d", i+1)
		if inc > 0 {
			s.Proc += fmt.Sprintf(".%d", inc+1)
		}
		if t.inProcess {
			m := startInProcess(wl, base, s, sink)
			m.incarnation = inc
			return m, nil
		}
		m, err := startProcess(o.Exe, o.Args, s, sink)
		if err != nil {
			return nil, err
		}
		m.incarnation = inc
		return m, nil
	}
	for i := range members {
		if members[i], err = startMember(i, 0); err != nil {
			for _, m := range members[:i] {
				m.stop(5 * time.Second)
			}
			return fail(err)
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, uint64(len(wl.name))))
	settle := time.Duration(0)
	if wl.settle != nil {
		settle = wl.settle(ttl)
	}
	faultsEnd := start.Add(o.Duration)
	nem := &nemesis{o: o, wl: wl, t: t, ttl: ttl, rng: rng, members: members, hold: hold, faults: r.Faults, restart: startMember, px: px}
	if wl.leaseKeys != nil && !o.Faults.NoForget && t.kind != storeurl.Etcd {
		keys := wl.leaseKeys(base)
		nem.forget = func(ctx context.Context) (int, error) { return base.env.ForgetEnded(ctx, keys) }
	}
	nemErr := nem.run(ctx, faultsEnd, func(elapsed time.Duration) {
		g, c := countAck(b, Guarded), countAck(b, Control)
		progress(o.Progress, "%s on %s: %s/%s guarded acknowledged %d, control acknowledged %d, faults %d",
			wl.name, t.name, elapsed.Round(time.Second), o.Duration, g, c, sum(r.Faults))
	})
	nem.healAll()
	if settle > 0 && ctx.Err() == nil {
		progress(o.Progress, "%s on %s: faults over; letting the workers settle for %v", wl.name, t.name, settle)
		sleepCtx(ctx, settle)
	}
	if wl.settled != nil && ctx.Err() == nil {
		ri := &runInfo{start: start, faultsEnd: faultsEnd, ttl: ttl}
		deadline := time.Now().Add(o.CheckTimeout)
		for {
			done, err := wl.settled(ctx, base, ri)
			if done || ctx.Err() != nil || time.Now().After(deadline) {
				if !done {
					progress(o.Progress, "%s on %s: the workers did not finish the run's work within %v (%v); judging as it is", wl.name, t.name, o.CheckTimeout, err)
				}
				break
			}
			progress(o.Progress, "%s on %s: waiting for the workers to finish the run's work", wl.name, t.name)
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
	stopping := time.Now() // the workers stop campaigning, writing, asking
	var stderr []string
	for _, m := range nem.members {
		m.stop(10 * time.Second)
		if s := strings.TrimSpace(m.stderr.String()); s != "" && !m.dead {
			stderr = append(stderr, m.name+": "+s)
		}
	}
	for _, m := range nem.retired {
		if s := strings.TrimSpace(m.stderr.String()); s != "" && strings.Contains(s, "proof worker:") {
			stderr = append(stderr, m.name+": "+s)
		}
	}
	end := time.Now()
	r.Duration = end.Sub(start)
	if nemErr != nil {
		return fail(nemErr)
	}
	h := b.history()
	ri := &runInfo{start: start, faultsEnd: faultsEnd, end: end, ttl: ttl, dir: o.Dir, name: wl.name + "-" + t.name, checkTimeout: o.CheckTimeout,
		workers: len(nem.members), downs: nem.dt.closed(end), stalls: nem.stalls, stopping: stopping}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	r.Guarded = wl.check(cctx, base, ri, h, Guarded)
	r.Control = wl.check(cctx, base, ri, h, Control)
	r.Files = ri.files
	switch {
	case r.Guarded.Count > 0:
		r.Verdict = VerdictFail
	case r.Control.Count == 0:
		r.Verdict = VerdictInconclusive
	case r.Guarded.Acknowledged == 0:
		// Nothing the guards let through, so nothing they kept right.
		r.Verdict = VerdictInconclusive
		r.Note = "the guarded run acknowledged no operation"
	default:
		r.Verdict = VerdictPass
	}
	if len(stderr) > 0 {
		out := "worker output: " + strings.Join(stderr, "; ")
		if len(out) > 600 {
			out = out[:600] + "…"
		}
		if r.Note != "" {
			out = r.Note + "; " + out
		}
		r.Note = out
	}
	return r
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func countAck(b *builder, mode string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, op := range b.ops {
		if op.Mode == mode && op.Status == OK && mutating[op.F] {
			n++
		}
	}
	return n
}

// mutating names the operations that count as attempts.
var mutating = map[string]bool{"write": true, "do": true, "effect": true, "save": true, "allow": true, "run": true, "reclaim": true}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// holders tracks, from the live events, which worker holds a lease in
// which mode, so the nemesis can pause a holder; and, for workloads that
// aim, reports grants and acknowledged writes to the nemesis as they
// happen.
type holders struct {
	mu      sync.Mutex
	last    map[string]string // mode → proc that last acquired
	pending map[string]Event  // proc/id → invocation of an acquire or write
	// aims receives grants and acknowledged writes (nil: not tracked).
	aims chan aimEvent
}

// aimEvent is the completion of a grant, a write or a release in a
// workload that aims.
type aimEvent struct {
	kind            string // "grant", "write", "release"
	ok              bool   // acknowledged
	proc, mode, key string
	fence           uint64
	validUntil      int64 // of a grant, Unix nanoseconds
}

func newHolders(aim bool) *holders {
	h := &holders{last: map[string]string{}}
	if aim {
		h.pending = map[string]Event{}
		h.aims = make(chan aimEvent, 1024)
	}
	return h
}

func (h *holders) observe(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Ev == "invoke" && (e.F == "read" || e.F == "do" || e.F == "load" || e.F == "allow" || e.F == "run") {
		h.last[e.Mode] = e.Proc
	}
	if h.aims == nil {
		return
	}
	k := e.Proc + "/" + itoa(e.ID)
	if e.Ev == "invoke" {
		if e.F == "acquire" || e.F == "write" || e.F == "release" {
			h.pending[k] = e
		}
		return
	}
	inv, ok := h.pending[k]
	if !ok {
		return
	}
	delete(h.pending, k)
	a := aimEvent{kind: inv.F, ok: e.Ev == string(OK), proc: e.Proc, mode: inv.Mode, key: inv.Key, fence: max(e.Fence, inv.Fence)}
	if a.kind == "acquire" {
		a.kind = "grant"
		a.validUntil, _ = strconv.ParseInt(e.Value, 10, 64)
	}
	select {
	case h.aims <- a:
	default: // the nemesis is behind: it misses this one
	}
}

func (h *holders) holder(mode string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[mode]
}
