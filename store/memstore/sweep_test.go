package memstore_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/memstore"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Lease records free for longer than the fence retention are swept; held
// ones and recently freed ones stay, and a swept key's next fence is still
// above its last.
func TestSweepLeases(t *testing.T) {
	ctx := t.Context()
	clk := &clock{t: time.Now()}
	s := newMem(t, &memstore.Options{Clock: clk.Now})
	ls := s.Leases()
	fences := map[string]uint64{}
	for i := range 300 {
		k := fmt.Sprintf("order/%d", i)
		tok := lease.NewToken()
		g, err := ls.Acquire(ctx, k, tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fences[k] = g.Fence
		if i%2 == 0 {
			if err := ls.Release(ctx, k, tok); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Add(time.Hour) // every lease ended an hour ago
	if r, err := s.Sweep(ctx, retention.Options{FenceRetention: 2 * time.Hour}); err != nil || r.Total() != 0 {
		t.Fatalf("Sweep within a retention of 2h: %+v, %v; want nothing deleted", r, err)
	}
	held := lease.NewToken()
	if _, err := ls.Acquire(ctx, "order/7", held, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	// A small limit: bounded work, and More until done.
	r, err := s.Sweep(ctx, retention.Options{Limit: 10})
	if err != nil || r.Deleted[retention.Leases] != 10 || !r.More {
		t.Fatalf("Sweep(Limit 10) = %+v, %v; want 10 deleted and more", r, err)
	}
	total := 10
	for r.More {
		if r, err = s.Sweep(ctx, retention.Options{Limit: 50}); err != nil {
			t.Fatal(err)
		}
		total += r.Total()
	}
	if total != 299 {
		t.Fatalf("swept %d records, want 299 (all but the held one)", total)
	}
	info, err := ls.Inspect(ctx, "order/7")
	if err != nil || !info.Held {
		t.Fatalf("held key after Sweep: %+v, %v", info, err)
	}
	list, err := s.Leases().(lease.Lister).List(ctx, "order/", "", 1000)
	if err != nil || len(list) != 1 {
		t.Fatalf("List after Sweep: %d keys, %v; want 1", len(list), err)
	}
	g, err := ls.Acquire(ctx, "order/8", lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= fences["order/8"] {
		t.Fatalf("fence after the record was swept: %d, %v; want above %d", g.Fence, err, fences["order/8"])
	}
	if _, err := s.Sweep(ctx, retention.Options{Limit: -1}); err == nil {
		t.Fatal("negative Limit accepted")
	}
}

// The memory of swept records is given back: 300k distinct keys that
// ended long ago leave little behind after a sweep.
func TestSweepReleasesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 300k records")
	}
	ctx := t.Context()
	clk := &clock{t: time.Now()}
	s := newMem(t, &memstore.Options{Clock: clk.Now})
	ls := s.Leases()
	tok := lease.NewToken()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// Other tests in the package may hold memory meanwhile: judge the
	// records' share, above the heap before they were made.
	base := heap()
	for i := range 300_000 {
		if _, err := ls.Acquire(ctx, fmt.Sprintf("key/%07d", i), tok, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	full := heap()
	clk.Add(retention.DefaultFenceRetention + time.Hour)
	for {
		r, err := s.Sweep(ctx, retention.Options{Limit: retention.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if !r.More {
			break
		}
	}
	after := heap()
	runtime.KeepAlive(s)
	if full <= base {
		t.Fatalf("heap %d bytes with the records, %d without: nothing to measure", full, base)
	}
	if after > base && after-base > (full-base)/4 {
		t.Fatalf("heap %d bytes after the sweep, %d with the records, %d before them: the records' memory was kept", after, full, base)
	}
}

// TestSweepDropsDeadQueues: the queue of a key whose waiters all crashed
// (their places expired, nobody touched the key since) is gone after a
// Sweep.
func TestSweepDropsDeadQueues(t *testing.T) {
	clk := &clock{t: time.Now()}
	s := newMem(t, &memstore.Options{Clock: clk.Now})
	ctx := t.Context()
	q := s.Leases().(leasedriver.Queuer)
	if _, err := s.Leases().Acquire(ctx, "k", "holder", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"w1", "w2"} {
		if _, err := q.AcquireQueued(ctx, "k", tok, time.Minute, "", time.Second); err == nil {
			t.Fatalf("%s granted a held key", tok)
		}
	}
	if n := s.QueuedKeys(); n != 1 {
		t.Fatalf("%d queues, want 1", n)
	}
	clk.Add(2 * time.Second)
	if _, err := s.Sweep(ctx, retention.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := s.QueuedKeys(); n != 0 {
		t.Fatalf("%d queues after the sweep, want 0", n)
	}
}
