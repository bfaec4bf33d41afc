package proof

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/memstore"
)

// TestRecordRenewals: the election's store records each renewal of the
// election's key as a "renew" of the term's fence with a validity ahead of
// its send, and keeps the store's queue and wake-ups.
func TestRecordRenewals(t *testing.T) {
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []Event
	)
	rec := newRecorder("w1", func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	var fence atomic.Uint64
	key := election.KeyPrefix + "rec"
	st := recordRenewals(m.Leases(), rec, Guarded, key, &fence)
	if _, ok := st.(driver.Queuer); !ok {
		t.Fatal("the recording store hides the store's queue")
	}
	if _, ok := st.(driver.Waker); !ok {
		t.Fatal("the recording store hides the store's wake-ups")
	}
	e, err := election.New(st, "rec", &election.Options{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tm, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence.Store(tm.Fence())
	renewals := func() (n int, bad string) {
		mu.Lock()
		defer mu.Unlock()
		invoked := map[int64]Event{}
		for _, ev := range events {
			if ev.Ev == "invoke" {
				invoked[ev.ID] = ev
				continue
			}
			in, ok := invoked[ev.ID]
			if !ok || in.F != "renew" {
				continue
			}
			v, _ := strconv.ParseInt(ev.Value, 10, 64)
			switch {
			case ev.Ev != string(OK) || in.Key != key || ev.Fence != tm.Fence() || in.Mode != Guarded:
				return n, "a renewal recorded as " + ev.Ev + " on " + in.Key
			case v <= in.T:
				return n, "a renewal's validity before its send"
			}
			n++
		}
		return n, ""
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		n, bad := renewals()
		if bad != "" {
			t.Fatal(bad)
		}
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals recorded, want 2", n)
		}
	}
	if err := tm.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
