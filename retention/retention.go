// Package retention is the shared surface of the stores' sweeps: what a
// sweep may delete, what it reports, and a background loop that runs one
// at an interval.
//
// Every store expires or sweeps what it keeps: a record that is past its
// retention counts as absent on read, and Sweep deletes it, a bounded
// number of rows per call, never touching a live one. A lease row (or key)
// that is no longer held is dropped once its lease ended (after
// FenceRetention, zero by default): the store first raises its fence floor
// (one record per table, Redis Cluster hash slot or store, never one per
// key) to the row's fence, and every later grant's fence is above the floor
// as well as the store's clock (lease/driver.NextFence), so fences never go
// back although nothing is kept per ended lease. See docs/operations.md for
// each store's retention.
package retention

import (
	"context"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults of Options.
const (
	// DefaultLimit is how many rows of each kind one Sweep call deletes at
	// most.
	DefaultLimit = 1000
	// MaxLimit is the largest Options.Limit.
	MaxLimit = 100000
	// DefaultFenceRetention is how long a free lease row is kept with its
	// last fence for Inspect and List: not at all (the fence floor, not the
	// row, keeps later fences above it).
	DefaultFenceRetention = time.Duration(0)
	// DefaultScheduleRetention is how long finished slot records and ledger
	// rows are kept after they finished: 30 days. A job's latest slot
	// record is always kept.
	DefaultScheduleRetention = 30 * 24 * time.Hour
)

// ErrInvalid reports an option out of range.
var ErrInvalid = kind.New("retention: invalid option", tenure.ErrInvalid)

// Options bound one sweep. The zero value means the defaults.
type Options struct {
	// Limit is how many rows of each kind one call deletes at most (and,
	// where a store scans in key order, how many it examines). Default
	// DefaultLimit; at most MaxLimit.
	Limit int
	// FenceRetention is how long a lease row is kept after its lease ended
	// (released or expired), so Inspect and List still report its last
	// fence. Default DefaultFenceRetention (zero: the first sweep after the
	// lease ended drops it). Fences do not depend on it: a sweep raises the
	// store's fence floor to the fence of every row it drops.
	FenceRetention time.Duration
	// ScheduleRetention is how long finished slot records and ledger rows
	// are kept. Default DefaultScheduleRetention.
	ScheduleRetention time.Duration
}

// Resolve returns o with the defaults filled in, or an error wrapping
// ErrInvalid.
func (o Options) Resolve() (Options, error) {
	switch {
	case o.Limit < 0 || o.Limit > MaxLimit:
		return o, fmt.Errorf("%w: Limit %d out of range [0, %d]", ErrInvalid, o.Limit, MaxLimit)
	case o.FenceRetention < 0:
		return o, fmt.Errorf("%w: negative FenceRetention %v", ErrInvalid, o.FenceRetention)
	case o.ScheduleRetention < 0:
		return o, fmt.Errorf("%w: negative ScheduleRetention %v", ErrInvalid, o.ScheduleRetention)
	}
	if o.Limit == 0 {
		o.Limit = DefaultLimit
	}
	if o.FenceRetention == 0 {
		o.FenceRetention = DefaultFenceRetention
	}
	if o.ScheduleRetention == 0 {
		o.ScheduleRetention = DefaultScheduleRetention
	}
	return o, nil
}

// Kinds of rows a sweep deletes (the keys of Result.Deleted).
const (
	Leases         = "leases"
	Idempotency    = "idempotency"
	Sessions       = "sessions"
	RateLimits     = "ratelimits"
	Permits        = "permits"
	ScheduleSlots  = "schedule_slots"
	ScheduleLedger = "schedule_ledger"
)

// Result is what one sweep did.
type Result struct {
	// Deleted counts the rows deleted, per kind.
	Deleted map[string]int `json:"deleted"`
	// More reports that some kind may have more to delete (a bound was
	// reached, or a scan has not come round yet): call Sweep again.
	More bool `json:"more"`
}

// Add counts n deleted rows of kind.
func (r *Result) Add(kind string, n int) {
	if r.Deleted == nil {
		r.Deleted = map[string]int{}
	}
	r.Deleted[kind] += n
}

// SweepAll runs s's Sweep with o until it reports nothing more to delete,
// at most maxPasses times (0: 10,000), and returns the rows deleted over
// all passes; Result.More says that it stopped at maxPasses. Each pass is
// as bounded as one Sweep call; the first error stops it, with the counts
// so far.
func SweepAll(ctx context.Context, s Sweeper, o Options, maxPasses int) (Result, error) {
	if maxPasses <= 0 {
		maxPasses = 10000
	}
	total := Result{Deleted: map[string]int{}}
	for range maxPasses {
		r, err := s.Sweep(ctx, o)
		for k, n := range r.Deleted {
			total.Add(k, n)
		}
		if err != nil {
			return total, err
		}
		if total.More = r.More; !r.More {
			break
		}
	}
	return total, nil
}

// Total is the number of rows deleted.
func (r Result) Total() int {
	n := 0
	for _, v := range r.Deleted {
		n += v
	}
	return n
}

// String lists the counts, e.g. "leases=3 sessions=0".
func (r Result) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r.Deleted)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, r.Deleted[k])
	}
	return b.String()
}

// Sweeper is a store that sweeps what it keeps.
type Sweeper interface {
	// Sweep deletes rows past their retention, at most o.Limit of each
	// kind, and never a live one. It is safe to run concurrently with the
	// store's other calls and with other sweeps.
	Sweep(ctx context.Context, o Options) (Result, error)
}

// Start runs s.Sweep every interval until ctx ends or the returned stop is
// called (stop waits for a running sweep to return). A sweep that reports
// More runs again at once, up to 100 times in a row. Errors are logged to
// logger (nil: discarded) and the loop goes on.
func Start(ctx context.Context, s Sweeper, interval time.Duration, o Options, logger *slog.Logger) (stop func(), err error) {
	if interval <= 0 {
		return nil, fmt.Errorf("%w: interval %v must be positive", ErrInvalid, interval)
	}
	if _, err := o.Resolve(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for range 100 {
				r, err := s.Sweep(ctx, o)
				if err != nil {
					if ctx.Err() == nil {
						logger.WarnContext(ctx, "retention: sweep failed", "err", err)
					}
					break
				}
				if r.Total() > 0 {
					logger.DebugContext(ctx, "retention: swept", "deleted", r.String())
				}
				if !r.More || ctx.Err() != nil {
					break
				}
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}
