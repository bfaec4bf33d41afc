package ratelimittest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
)

// Retained reaches what a store keeps of rate limit state and permits,
// expired or not, for the case that checks state is kept until the end of
// its window (or its last permit) and no longer (docs/operations.md,
// "Retention: nothing grows without bound").
type Retained struct {
	// Reclaim lets the store drop the state that expired before the
	// call, the way it does that on its own: its sweep (SQLite,
	// PostgreSQL), the writes that sweep (memory), nothing where keys
	// expire natively (Redis). The case calls it again until the state is
	// gone or its deadline passes.
	Reclaim func(t *testing.T)
	// Stored lists every key or row the store physically holds for this
	// target, expired ones included, as the store spells it: the spelling
	// of a limit's state contains the limit's name. An entry the store
	// cannot name is listed as any other text, so that it counts.
	Stored func(t *testing.T) []string
}

func needRetained(t *testing.T, tg Target) *Retained {
	t.Helper()
	if tg.Retained == nil || tg.Retained.Reclaim == nil || tg.Retained.Stored == nil {
		t.Skip("ratelimittest: the Target does not reach what the store keeps of expired state (Retained)")
	}
	return tg.Retained
}

// named counts the entries of stored that name each of names.
func named(stored, names []string) map[string]int {
	n := map[string]int{}
	for _, s := range stored {
		for _, name := range names {
			if strings.Contains(s, name) {
				n[name]++
			}
		}
	}
	return n
}

// testExpiredStateLeavesNoKeys: the state of many keys, under every
// algorithm, a group and a concurrency limit (permits held until they
// expire, and released), leaves nothing in the store once its window has
// passed and the store has reclaimed it, and those keys start afresh;
// state whose window has not passed, and held permits, are kept and still
// count.
func testExpiredStateLeavesNoKeys(t *testing.T, tg Target) {
	r := needRetained(t, tg)
	ctx := ctxT(t)
	// Short state: a minute on a driven clock; on a real one, short
	// enough to wait for.
	period := 300 * time.Millisecond
	if tg.Clock != nil {
		period = time.Minute
	}
	// How long, in real time, the store may take to judge and reclaim.
	within := 20*300*time.Millisecond + 10*time.Second
	const keysPer, groupKeys, permitKeys, keptKeys = 20, 10, 20, 3
	var short, long []*ratelimit.Limiter
	for _, alg := range Algorithms {
		short = append(short, newLimiter(t, tg.Store, alg, limitFor(alg, 5, period)))
		long = append(long, newLimiter(t, tg.Store, alg, limitFor(alg, 5, time.Hour)))
	}
	g, err := ratelimit.NewGroup(uniq("grp"), short...)
	if err != nil {
		t.Fatal(err)
	}
	shortC := newConcurrency(t, tg.Store, 2, period)
	longC := newConcurrency(t, tg.Store, 1, time.Hour)
	var shortNames, longNames []string
	for i := range short {
		shortNames = append(shortNames, short[i].Limit().Name)
		longNames = append(longNames, long[i].Limit().Name)
	}
	shortNames = append(shortNames, shortC.Limit().Name)
	longNames = append(longNames, longC.Limit().Name)

	for _, l := range short {
		for i := range keysPer {
			if d, err := l.AllowN(ctx, fmt.Sprintf("k%03d", i), 2); err != nil || !d.Allowed {
				t.Fatalf("AllowN: %+v, %v", d, err)
			}
		}
	}
	for i := range groupKeys {
		k := fmt.Sprintf("g%03d", i)
		if d, _, err := g.AllowN(ctx, []string{k, k, k, k}, 1); err != nil || !d.Allowed {
			t.Fatalf("group AllowN: %+v, %v", d, err)
		}
	}
	fences := map[string]uint64{}
	for i := range permitKeys {
		k := fmt.Sprintf("p%03d", i)
		p, err := shortC.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		fences[k] = p.Fence()
		if i%2 == 1 {
			if err := p.Release(ctx); err != nil && !errors.Is(err, ratelimit.ErrPermitLost) {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	for _, l := range long {
		for i := range keptKeys {
			if d, err := l.AllowN(ctx, fmt.Sprintf("k%03d", i), 2); err != nil || !d.Allowed {
				t.Fatalf("AllowN: %+v, %v", d, err)
			}
		}
	}
	var held []*ratelimit.Permit
	for i := range keptKeys {
		p, err := longC.TryAcquire(ctx, fmt.Sprintf("p%03d", i))
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		held = append(held, p)
	}
	before := named(r.Stored(t), longNames)
	for _, name := range longNames {
		if before[name] != keptKeys {
			t.Fatalf("Stored lists %d entries of limit %s, want its %d keys: the hook does not see the state", before[name], name, keptKeys)
		}
	}
	if tg.Clock != nil {
		// Nothing has expired on the store's clock yet: reclaiming now
		// keeps every key's state (a released key's may have gone).
		r.Reclaim(t)
		got := named(r.Stored(t), shortNames)
		for _, l := range short {
			if n := got[l.Limit().Name]; n != keysPer+groupKeys {
				t.Fatalf("before its window passed, reclaiming left %d entries of limit %s, want %d", n, l.Limit().Name, keysPer+groupKeys)
			}
		}
		if n := got[shortC.Limit().Name]; n < permitKeys/2 {
			t.Fatalf("before their permits expired, reclaiming left %d entries of %s, want at least the %d keys with a permit held", n, shortC.Limit().Name, permitKeys/2)
		}
		// Past every window (a sliding window's state lasts two
		// periods), and then some.
		tg.Clock.Advance(2*period + 5*time.Second)
	} else {
		// The store's own judgement: none of the short state is live.
		deadline := time.Now().Add(within)
		for {
			live := 0
			for _, k := range keys(t, tg) {
				for _, name := range shortNames {
					if strings.Contains(k.Key, name) {
						live++
					}
				}
			}
			if live == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d keys of the short limits are still live %v after their window", live, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var stored []string
	for deadline := time.Now().Add(within); ; {
		r.Reclaim(t)
		stored = r.Stored(t)
		got := named(stored, longNames)
		var left []string
		for _, s := range stored {
			if !slices.ContainsFunc(longNames, func(name string) bool { return strings.Contains(s, name) }) {
				left = append(left, s)
			}
		}
		for _, name := range longNames {
			if got[name] != keptKeys {
				t.Fatalf("reclaiming expired state left %d entries of limit %s, whose window has not passed; want its %d keys", got[name], name, keptKeys)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the windows of %d keys passed and the store reclaimed their state, it keeps %d other entries (%q...), want only the %d of the limits whose window has not passed",
				len(short)*(keysPer+groupKeys)+permitKeys, len(left), left[:min(len(left), 3)], len(longNames)*keptKeys)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The reclaimed keys start afresh; the kept ones still count.
	for i, l := range short {
		for _, k := range []string{"k000", fmt.Sprintf("k%03d", keysPer-1), "g000"} {
			if d, err := l.AllowN(ctx, k, 5); err != nil || !d.Allowed {
				t.Fatalf("%v: the whole capacity on %s after its state was reclaimed: %+v, %v", l.Algorithm(), k, d, err)
			}
		}
		if d, err := long[i].AllowN(ctx, "k000", 4); err != nil || d.Allowed {
			t.Fatalf("%v: 4 more on a key that used 2 of 5 within the window: %+v, %v; want it denied", long[i].Algorithm(), d, err)
		}
	}
	for k, old := range fences {
		a, err := shortC.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("a permit on %s after its state was reclaimed: %v", k, err)
		}
		if a.Fence() <= old {
			t.Fatalf("a permit on %s after its state was reclaimed: fence %d, not above %d", k, a.Fence(), old)
		}
		if _, err := shortC.TryAcquire(ctx, k); err != nil {
			t.Fatalf("a second permit on %s after its state was reclaimed: %v", k, err)
		}
	}
	for i, p := range held {
		if _, err := longC.TryAcquire(ctx, fmt.Sprintf("p%03d", i)); !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("a permit on a key whose one permit is held: %v, want ErrLimited", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release of a held permit after reclaiming: %v", err)
		}
	}
}
