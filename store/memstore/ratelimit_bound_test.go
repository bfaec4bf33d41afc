package memstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/store/memstore"
)

// TestRateLimitStateReleased: one new key per request leaves expired state
// behind; it is released as fast as it is created, so the entries held
// stay near the live ones (about a second's worth plus the grace second),
// for single limiters, groups and permits alike.
func TestRateLimitStateReleased(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
	ms := newMem(t, &memstore.Options{Clock: clock.Now})
	l, _ := ratelimit.New(ms.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "a", Rate: 1, Period: time.Second}, nil)
	w, _ := ratelimit.New(ms.Limits(), ratelimit.SlidingWindow, ratelimit.Limit{Name: "b", Rate: 5, Period: 500 * time.Millisecond}, nil)
	g, _ := ratelimit.NewGroup("g", l, w)
	c, _ := ratelimit.NewConcurrency(ms.Limits(), ratelimit.ConcurrencyLimit{Permits: 1, TTL: time.Second}, nil)
	most := 0
	for i := range 60_000 {
		k := "k" + strconv.Itoa(i)
		var err error
		switch i % 3 {
		case 0:
			_, err = l.Allow(ctx, k)
		case 1:
			_, _, err = g.AllowN(ctx, []string{k, k}, 1)
		case 2:
			_, err = c.TryAcquire(ctx, k) // never released: expires
		}
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
		if i%1000 == 999 {
			n, err := ms.RateLimitEntries()
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, n)
		}
	}
	// Live: about 1000 requests a second, up to two entries each; expired
	// but within the grace second: as many again.
	if most > 6_000 {
		t.Fatalf("%d entries held for about 2,700 live ones", most)
	}
	clock.Advance(time.Hour)
	for i := range 10_000 { // writes to one key sweep everything else
		if _, err := l.Allow(ctx, "again"); err != nil {
			t.Fatal(err)
		}
		_ = i
		clock.Advance(time.Second)
	}
	if n, err := ms.RateLimitEntries(); err != nil || n != 1 {
		t.Fatalf("%d entries (%v) after everything else expired, want 1", n, err)
	}
}

// TestRateLimitKeysFull: with LimitKeys entries held and none expired, a
// decision that needs a new entry is refused (never admitted past a
// limit), keys that hold state are decided as usual, and an expired entry
// makes room.
func TestRateLimitKeysFull(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
	ms := newMem(t, &memstore.Options{Clock: clock.Now, LimitKeys: 4})
	l, _ := ratelimit.New(ms.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "a", Rate: 2, Period: time.Minute}, nil)
	for i := range 4 {
		if d, err := l.Allow(ctx, "k"+strconv.Itoa(i)); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v %v", i, d, err)
		}
		clock.Advance(time.Second)
	}
	d, err := l.Allow(ctx, "new")
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter != 56*time.Second {
		t.Fatalf("a new key in a full store: %+v %v, want refused until the soonest expiry (56s)", d, err)
	}
	if d, err := l.Peek(ctx, "new", 1); err != nil || !d.Allowed {
		t.Fatalf("a peek needs no room: %+v %v", d, err)
	}
	g, _ := ratelimit.NewGroup("g", l)
	if d, _, err := g.AllowN(ctx, []string{"new"}, 1); err != nil || d.Allowed {
		t.Fatalf("a group decision in a full store: %+v %v", d, err)
	}
	c, _ := ratelimit.NewConcurrency(ms.Limits(), ratelimit.ConcurrencyLimit{Permits: 1}, nil)
	var le *ratelimit.LimitedError
	if _, err := c.TryAcquire(ctx, "new"); !errors.As(err, &le) || le.RetryAfter != 56*time.Second {
		t.Fatalf("a permit in a full store: %v", err)
	}
	// Keys with state are decided as usual, and never past their limit.
	if d, err := l.Allow(ctx, "k0"); err != nil || !d.Allowed {
		t.Fatalf("k0 second unit: %+v %v", d, err)
	}
	if d, err := l.Allow(ctx, "k0"); err != nil || d.Allowed {
		t.Fatalf("k0 third unit: %+v %v", d, err)
	}
	if n, _ := ms.RateLimitEntries(); n != 4 {
		t.Fatalf("%d entries, want 4", n)
	}
	clock.Advance(56 * time.Second) // k0's window ends
	if d, err := l.Allow(ctx, "new"); err != nil || !d.Allowed {
		t.Fatalf("after the soonest expiry: %+v %v", d, err)
	}
	if n, _ := ms.RateLimitEntries(); n != 4 {
		t.Fatalf("%d entries, want 4", n)
	}
}

// TestRateLimitKeysFullShards: a store large enough to split its map into
// parts still counts entries across all of them: when full, a new key is
// refused until the soonest entry of any part expires, and concurrent
// decisions on new keys never hold more than LimitKeys entries.
func TestRateLimitKeysFullShards(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC))
	const max = 4 * 4096
	ms := newMem(t, &memstore.Options{Clock: clock.Now, LimitKeys: max})
	l, _ := ratelimit.New(ms.Limits(), ratelimit.FixedWindow, ratelimit.Limit{Name: "a", Rate: 2, Period: time.Minute}, nil)
	if d, err := l.Allow(ctx, "first"); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	clock.Advance(time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range max / 4 {
				if _, err := l.Allow(ctx, "k"+strconv.Itoa(w)+"-"+strconv.Itoa(i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, err := ms.RateLimitEntries(); err != nil || n != max {
		t.Fatalf("%d entries (%v), want %d", n, err, max)
	}
	d, err := l.Allow(ctx, "new")
	if err != nil || d.Allowed || d.RetryAfter != 59*time.Second {
		t.Fatalf("a new key in a full store: %+v %v, want refused until the soonest expiry (59s)", d, err)
	}
	clock.Advance(59 * time.Second) // "first" expires, whichever part holds it
	if d, err := l.Allow(ctx, "new"); err != nil || !d.Allowed {
		t.Fatalf("after the soonest expiry: %+v %v", d, err)
	}
	if n, err := ms.RateLimitEntries(); err != nil || n != max {
		t.Fatalf("%d entries (%v), want %d", n, err, max)
	}
	// A group whose keys fall in different parts is still all or nothing.
	g, _ := ratelimit.NewGroup("g", l)
	clock.Advance(time.Minute) // everything expired
	for i := range 64 {
		k := "g" + strconv.Itoa(i)
		if d, _, err := g.AllowN(ctx, []string{k}, 2); err != nil || !d.Allowed {
			t.Fatalf("group %s: %+v %v", k, d, err)
		}
		if d, _, err := g.AllowN(ctx, []string{k}, 1); err != nil || d.Allowed {
			t.Fatalf("group %s past its limit: %+v %v", k, d, err)
		}
	}
	if _, err := ms.RateLimitEntries(); err != nil {
		t.Fatal(err)
	}
}
