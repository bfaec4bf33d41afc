// Command ratios runs tenure's acquire+release cycle benchmarks against the
// peer libraries and raw baselines in alternating rounds on throwaway
// servers (or the ones named by TENURE_BENCH_REDIS and
// TENURE_BENCH_POSTGRES), and prints the median cycles per second of each
// contender with the ratios tenure/peer.
//
//	go run ./cmd/ratios                       # 5 rounds of 1s per benchmark
//	go run ./cmd/ratios -rounds 9 -benchtime 2s -suite redis
//
// Progress goes to stderr, the results to stdout.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/bench"
)

// target is a goal of the issue: contender tenure (or tenure-locker) at
// least ratio times peer.
type target struct {
	suite   string
	workers int
	peer    string
	ratio   float64
}

var targets = []target{
	{"redis", 1, "redislock", 1.0},
	{"redis", bench.MaxWorkers, "redislock", 2.0},
	{"postgres", 1, "raw", 0.8},
	{"postgres", bench.MaxWorkers, "raw", 0.8},
	{"postgres", 1, "advisory", 0.5},
	{"postgres", bench.MaxWorkers, "advisory", 0.5},
	{"redis-session", 1, "scs", 1.0},
	{"redis-session", bench.MaxWorkers, "scs", 1.0},
	{"ratelimit-gcra", 1, "redis_rate", 1.0},
	{"ratelimit-gcra", bench.MaxWorkers, "redis_rate", 2.0},
	{"ratelimit-fixed", 1, "ulule", 1.0},
	{"ratelimit-fixed", bench.MaxWorkers, "ulule", 1.0},
	{"ratelimit-mem", 1, "x-time-rate", 0.5},
	{"ratelimit-mem", bench.MaxWorkers, "x-time-rate", 0.5},
	{"etcd", 1, "mutex", 1.0},
	{"etcd", bench.MaxWorkers, "mutex", 1.0},
	// serve (its HTTP API) against the library on the same store.
	{"serve-redis-lease", 1, "direct", 0.3},
	{"serve-redis-lease", bench.MaxWorkers, "direct", 0.25},
	{"serve-redis-rate", 1, "direct", 0.3},
	{"serve-redis-rate", bench.MaxWorkers, "direct", 0.25},
	{"serve-sqlite-lease", 1, "direct", 0.3},
	{"serve-sqlite-lease", bench.MaxWorkers, "direct", 0.25},
	{"serve-sqlite-rate", 1, "direct", 0.3},
	{"serve-sqlite-rate", bench.MaxWorkers, "direct", 0.25},
	// serve (its HTTP API, and its Envoy rate limit service: tenure-rls)
	// keeps a lead over gubernator's gRPC API (in memory).
	{"serve-redis-rate", 1, "gubernator", 1.0},
	{"serve-redis-rate", bench.MaxWorkers, "gubernator", 1.0},
	{"serve-sqlite-rate", 1, "gubernator", 1.0},
	// Not at 50 workers on SQLite: a decision there is a committed write
	// to a file, and the library itself, with no server in front, makes
	// about half the decisions gubernator makes in memory.
	// and over envoyproxy/ratelimit's gRPC API on the same Redis.
	{"serve-redis-rate", 1, "envoy-ratelimit", 1.0},
	{"serve-redis-rate", bench.MaxWorkers, "envoy-ratelimit", 1.0},
}

// maxAddedP50 is the latency tenure serve may add to a store call at the
// median with one worker (the serve suites: tenure's p50 minus direct's),
// in µs.
const maxAddedP50 = 150

// group is one comparison: every contender of a suite at one worker count.
type group struct {
	suite   string
	workers int
	samples map[string][]float64 // contender -> cycles/s per round
	client  map[string][]float64 // contender -> client CPU µs per cycle per round
	server  map[string][]float64 // contender -> server CPU µs per cycle per round
	p50     map[string][]float64 // contender -> median call latency µs per round (serve suites)
	p99     map[string][]float64 // contender -> 99th percentile call latency µs per round
}

func main() {
	fs := flag.NewFlagSet("ratios", flag.ExitOnError)
	rounds := fs.Int("rounds", 5, "rounds; each runs every benchmark once, in a rotated order")
	benchtime := fs.String("benchtime", "1s", "run time of each benchmark (a duration, or Nx for N cycles)")
	suites := fs.String("suite", strings.Join(bench.Suites, ","), "suites to run (comma-separated)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/ratios [flags]\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "ratios: -rounds must be at least 1")
		os.Exit(2)
	}
	testing.Init()
	if err := flag.Set("test.benchtime", *benchtime); err != nil {
		fmt.Fprintf(os.Stderr, "ratios: -benchtime %q: %v\n", *benchtime, err)
		os.Exit(2)
	}
	os.Exit(run(*rounds, *benchtime, strings.Split(*suites, ",")))
}

func run(rounds int, benchtime string, suites []string) int {
	env := bench.NewEnv()
	defer env.Close()

	var groups []*group
	servers := map[string]string{}
	for _, s := range suites {
		if len(bench.Contenders(s)) == 0 {
			fmt.Fprintf(os.Stderr, "ratios: unknown suite %q (have %v)\n", s, bench.Suites)
			return 2
		}
		fmt.Fprintf(os.Stderr, "starting %s ...\n", s)
		if err := env.Prepare(s); err != nil {
			fmt.Fprintf(os.Stderr, "ratios: %s: %v\n", s, err)
			return 1
		}
		servers[s] = env.Server(s)
		fmt.Fprintf(os.Stderr, "  %s\n", servers[s])
		for _, w := range bench.Workers {
			groups = append(groups, &group{suite: s, workers: w,
				samples: map[string][]float64{}, client: map[string][]float64{}, server: map[string][]float64{},
				p50: map[string][]float64{}, p99: map[string][]float64{}})
		}
	}

	load0 := loadavg()
	start := time.Now()
	for r := range rounds {
		for _, g := range groups {
			cs := bench.Contenders(g.suite)
			// Rotate the order every round, so that no contender always runs
			// first (on cold caches) or right after the same neighbour.
			k := r % len(cs)
			order := append(slices.Clone(cs[k:]), cs[:k]...)
			for _, c := range order {
				res := testing.Benchmark(func(b *testing.B) { env.Cycle(b, g.suite, c, g.workers) })
				v := res.Extra[bench.Metric]
				if res.N == 0 || v == 0 {
					fmt.Fprintf(os.Stderr, "ratios: %s %s workers=%d failed (run `go test -run '^$' -bench .` for the error)\n",
						g.suite, c, g.workers)
					return 1
				}
				g.samples[c] = append(g.samples[c], v)
				cpu := ""
				if x, ok := res.Extra[bench.ClientCPUMetric]; ok {
					g.client[c] = append(g.client[c], x)
					cpu += fmt.Sprintf("  client %.1f µs", x)
				}
				if x, ok := res.Extra[bench.ServerCPUMetric]; ok {
					g.server[c] = append(g.server[c], x)
					cpu += fmt.Sprintf("  server %.1f µs", x)
				}
				if x, ok := res.Extra[bench.LatencyP50Metric]; ok {
					g.p50[c] = append(g.p50[c], x)
					g.p99[c] = append(g.p99[c], res.Extra[bench.LatencyP99Metric])
					cpu += fmt.Sprintf("  p50 %.0f µs  p99 %.0f µs", x, res.Extra[bench.LatencyP99Metric])
				}
				fmt.Fprintf(os.Stderr, "round %d/%d  %-8s %2d workers  %-13s %9.0f cycles/s  (%d cycles)%s\n",
					r+1, rounds, g.suite, g.workers, c, v, res.N, cpu)
			}
		}
	}

	out := os.Stdout
	fmt.Fprintf(out, "cycles/s (lease suites: acquire+release; redis-session: load+idle refresh), median of %d alternating rounds, benchtime %s, %s %s/%s, %d CPUs (GOMAXPROCS %d), %s\n",
		rounds, benchtime, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		time.Since(start).Round(time.Second))
	fmt.Fprintf(out, "load average (1m 5m 15m) before: %s, after: %s\n", load0, loadavg())
	for _, s := range suites {
		fmt.Fprintf(out, "%s: %s\n", s, servers[s])
	}
	fmt.Fprintln(out)
	for _, g := range groups {
		printLine(out, g)
	}
	fmt.Fprintln(out)
	printTable(out, groups)
	fmt.Fprintln(out)
	printClients(out, groups)
	fmt.Fprintln(out)
	printLatency(out, groups)
	printTargets(out, groups)
	return 0
}

// loadavg returns the first three fields of /proc/loadavg: other work on
// the machine makes the results noisier.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func workersLabel(w int) string {
	if w == 1 {
		return "1 worker"
	}
	return strconv.Itoa(w) + " workers"
}

// printLine prints one group in the form
//
//	redis cycle, 1 worker:  tenure 12345/s  redislock 11000/s (tenure 1.12x) ...
func printLine(out io.Writer, g *group) {
	cs := bench.Contenders(g.suite)
	ten := median(g.samples["tenure"])
	fmt.Fprintf(out, "%s cycle, %s:", g.suite, workersLabel(g.workers))
	for _, c := range cs {
		m := median(g.samples[c])
		fmt.Fprintf(out, "  %s %.0f/s", c, m)
		if c != "tenure" {
			fmt.Fprintf(out, " (tenure %.2fx)", ten/m)
		}
	}
	fmt.Fprintln(out)
}

// printTable prints every group as a Markdown table.
func printTable(out io.Writer, groups []*group) {
	fmt.Fprintln(out, "| store | workers | contender | median cycles/s | min – max | tenure ÷ it | tenure-locker ÷ it | client CPU µs/cycle | server CPU µs/cycle |")
	fmt.Fprintln(out, "|---|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, g := range groups {
		ten := median(g.samples["tenure"])
		lock := median(g.samples["tenure-locker"])
		for _, c := range bench.Contenders(g.suite) {
			s := g.samples[c]
			m := median(s)
			lockCell := "–" // suites without a tenure-locker contender
			if lock > 0 {
				lockCell = fmt.Sprintf("%.2fx", lock/m)
			}
			fmt.Fprintf(out, "| %s | %d | %s | %.0f | %.0f – %.0f | %.2fx | %s | %s | %s |\n",
				g.suite, g.workers, c, m, slices.Min(s), slices.Max(s), ten/m, lockCell,
				cpuCell(g.client[c]), cpuCell(g.server[c]))
		}
	}
}

// cpuCell formats the median of CPU samples ("–" when not measured).
func cpuCell(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", median(xs))
}

// clientPeers are the comparisons of tenure on each Redis client: per
// suite, the peer library the cycle is divided by.
var clientPeers = []struct{ suite, peer string }{
	{"redis", "redislock"},
	{"ratelimit-gcra", "redis_rate"},
}

// printClients prints tenure on rueidis and on go-redis against the same
// peer, and the two clients against each other.
func printClients(out io.Writer, groups []*group) {
	fmt.Fprintln(out, "clients (tenure on rueidis and on go-redis, same scripts):")
	for _, cp := range clientPeers {
		for _, g := range groups {
			if g.suite != cp.suite || len(g.samples["tenure-goredis"]) == 0 {
				continue
			}
			peer := median(g.samples[cp.peer])
			ru, gr := median(g.samples["tenure"]), median(g.samples["tenure-goredis"])
			fmt.Fprintf(out, "  %-15s %-11s rueidis ÷ %s %5.2fx   go-redis ÷ %s %5.2fx   go-redis ÷ rueidis %5.2fx\n",
				g.suite, workersLabel(g.workers)+",", cp.peer, ru/peer, cp.peer, gr/peer, gr/ru)
		}
	}
}

// printLatency prints the call latencies of the suites that measure them
// (the serve suites) and what serve adds to direct's.
func printLatency(out io.Writer, groups []*group) {
	printed := false
	for _, g := range groups {
		if len(g.p50["tenure"]) == 0 {
			continue
		}
		if !printed {
			fmt.Fprintln(out, "latency of one call, µs (median over rounds of each round's percentile):")
			printed = true
		}
		fmt.Fprintf(out, "  %-18s %-11s", g.suite, workersLabel(g.workers)+",")
		for _, c := range bench.Contenders(g.suite) {
			fmt.Fprintf(out, "  %s p50 %.0f p99 %.0f", c, median(g.p50[c]), median(g.p99[c]))
		}
		if len(g.p50["direct"]) > 0 {
			fmt.Fprintf(out, "  added by serve: p50 %.0f p99 %.0f", median(g.p50["tenure"])-median(g.p50["direct"]),
				median(g.p99["tenure"])-median(g.p99["direct"]))
		}
		fmt.Fprintln(out)
	}
	if printed {
		fmt.Fprintln(out)
	}
}

// printTargets checks the goals.
func printTargets(out io.Writer, groups []*group) {
	fmt.Fprintln(out, "targets:")
	for _, t := range targets {
		i := slices.IndexFunc(groups, func(g *group) bool { return g.suite == t.suite && g.workers == t.workers })
		if i < 0 {
			continue
		}
		g := groups[i]
		peer := median(g.samples[t.peer])
		for _, c := range []string{"tenure", "tenure-goredis", "tenure-locker", "tenure-unlogged", "tenure-rls"} {
			// tenure-unlogged has a target against advisory only, and
			// tenure-rls (serve's gRPC API) against the gRPC peers.
			if len(g.samples[c]) == 0 || c == "tenure-unlogged" && t.peer != "advisory" ||
				c == "tenure-rls" && t.peer != "gubernator" && t.peer != "envoy-ratelimit" {
				continue
			}
			r := median(g.samples[c]) / peer
			verdict := "met"
			if r < t.ratio {
				verdict = "MISSED"
			}
			fmt.Fprintf(out, "  %-8s %-10s %-13s %5.2fx %-9s (target >= %.2gx)  %s\n",
				t.suite, workersLabel(t.workers)+",", c, r, t.peer, t.ratio, verdict)
		}
	}
	for _, g := range groups {
		if len(g.p50["tenure"]) == 0 || len(g.p50["direct"]) == 0 {
			continue
		}
		added := median(g.p50["tenure"]) - median(g.p50["direct"])
		verdict := "met"
		switch {
		case g.workers != 1:
			// With more workers than CPUs the median is the wait for a
			// CPU, not what serve's path costs: the target is at 1.
			verdict = "no target"
		case added > maxAddedP50:
			verdict = "MISSED"
		}
		fmt.Fprintf(out, "  %-8s %-10s p50 added by serve %6.0f µs (target <= %d µs)  %s\n",
			g.suite, workersLabel(g.workers)+",", added, maxAddedP50, verdict)
	}
}
