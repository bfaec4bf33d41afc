package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Hand-off metrics: how a contended key is passed on between waiters.
const (
	// HandoffMetric is hand-offs per second of wall time.
	HandoffMetric = "handoffs/s"
	// FairnessMetric is Jain's index over the workers' grant counts: 1
	// when every worker got the key as often, 1/n when one got it always.
	FairnessMetric = "jain"
	// WaitP99Metric and WaitMaxMetric are the 99th percentile and the
	// longest wait for the key, in milliseconds.
	WaitP99Metric = "wait-p99-ms"
	WaitMaxMetric = "wait-max-ms"
	// GapP50Metric and GapMeanMetric are the median and the mean time from
	// a holder's call to release the key to the next holder's grant, in
	// microseconds: the hand-off itself, without the hold.
	GapP50Metric  = "gap-p50-us"
	GapMeanMetric = "gap-mean-us"
)

// lockFunc waits for the contended key and returns its release.
type lockFunc func(ctx context.Context) (release func() error, err error)

// runHandoff runs b.N hand-offs of one key among workers goroutines, each
// holding it for hold, and reports hand-offs per second, Jain's fairness
// index over the workers and the p99 and longest wait.
func runHandoff(b *testing.B, workers int, hold time.Duration, newWorker func(w int) lockFunc) {
	locks := make([]lockFunc, workers)
	for w := range locks {
		locks[w] = newWorker(w)
	}
	ctx := context.Background()
	var (
		next    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		err     error
		wg      sync.WaitGroup
		mu      sync.Mutex
		waits   []time.Duration
		// released is when the last holder called its release (Unix
		// ns, 0 before the first); gaps are the hand-offs timed from it.
		released atomic.Int64
		gaps     []time.Duration
	)
	grants := make([]int, workers)
	n := int64(b.N)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			var mine, gapped []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				gaps = append(gaps, gapped...)
				mu.Unlock()
			}()
			for !stop.Load() {
				t0 := time.Now()
				release, e := locks[w](ctx)
				if e != nil {
					errOnce.Do(func() { err = e })
					stop.Store(true)
					return
				}
				mine = append(mine, time.Since(t0))
				if r := released.Load(); r != 0 {
					gapped = append(gapped, time.Duration(time.Now().UnixNano()-r))
				}
				if next.Add(1) > n {
					stop.Store(true)
				} else {
					grants[w]++
				}
				holdFor(hold)
				released.Store(time.Now().UnixNano())
				if e := release(); e != nil {
					errOnce.Do(func() { err = e })
					stop.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("%d workers: %v", workers, err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), HandoffMetric)
	b.ReportMetric(jain(grants), FairnessMetric)
	if len(gaps) > 0 {
		slices.Sort(gaps)
		var sum time.Duration
		for _, g := range gaps {
			sum += g
		}
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		b.ReportMetric(us(gaps[len(gaps)/2]), GapP50Metric)
		b.ReportMetric(us(sum/time.Duration(len(gaps))), GapMeanMetric)
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(waits[len(waits)*99/100]), WaitP99Metric)
		b.ReportMetric(ms(waits[len(waits)-1]), WaitMaxMetric)
	}
}

// jain is Jain's fairness index of xs: (Σx)² / (n·Σx²).
func jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
