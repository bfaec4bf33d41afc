package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Metric is the unit reported by every benchmark through b.ReportMetric.
const Metric = "cycles/s"

// cycleFunc acquires key and releases it again.
type cycleFunc func(ctx context.Context, key string) error

// newWorker returns the cycle of one worker; w numbers the workers from 0.
type newWorker func(w int) cycleFunc

// keys returns KeysPerWorker keys for each of workers workers, under a
// namespace of the contender's own.
func keys(namespace string, workers int) [][]string {
	ks := make([][]string, workers)
	for w := range ks {
		ks[w] = make([]string, KeysPerWorker)
		for i := range ks[w] {
			ks[w][i] = "bench:" + namespace + ":" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
		}
	}
	return ks
}

// runCycles runs b.N cycles spread over workers goroutines, each on keys of
// its own (no contention between workers: the store path is measured, not
// waiting), and reports the throughput in cycles per second of wall time.
// Workers take iterations from a shared counter, so all of them stay busy
// until the end. It also reports the CPU time per cycle of this process and,
// when serverCPU is not nil, of the server.
func runCycles(b *testing.B, namespace string, workers int, newWorker newWorker, serverCPU func(context.Context) (time.Duration, error)) {
	ks := keys(namespace, workers)
	cycles := make([]cycleFunc, workers)
	for w := range cycles {
		cycles[w] = newWorker(w)
	}
	ctx := context.Background()
	var (
		next    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		err     error
		wg      sync.WaitGroup
	)
	n := int64(b.N)
	var server0 time.Duration
	if serverCPU != nil {
		var err error
		if server0, err = serverCPU(ctx); err != nil {
			serverCPU = nil
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	client0 := processCPU()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			my := ks[w]
			for i := 0; !stop.Load() && next.Add(1) <= n; i++ {
				if e := cycles[w](ctx, my[i%len(my)]); e != nil {
					errOnce.Do(func() { err = e })
					stop.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	client := processCPU() - client0
	b.StopTimer()
	if err != nil {
		b.Fatalf("%s, %d workers: %v", namespace, workers, err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), Metric)
	perCycle := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(b.N) }
	b.ReportMetric(perCycle(client), ClientCPUMetric)
	if serverCPU != nil {
		if server1, err := serverCPU(ctx); err == nil {
			b.ReportMetric(perCycle(server1-server0), ServerCPUMetric)
		}
	}
}
