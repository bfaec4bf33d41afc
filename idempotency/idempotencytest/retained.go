package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/driver"
)

// Retained reaches what a store keeps of idempotency records, for the case
// that checks a record is kept for its retention and no longer
// (docs/operations.md, "Retention: nothing grows without bound").
type Retained struct {
	// Reclaim lets the store drop the records whose retention ended
	// before the call, the way it does that on its own: its sweep (SQLite,
	// PostgreSQL), the writes that sweep (memory), nothing where keys
	// expire natively (Redis). The case calls it again until the records
	// are gone or its deadline passes.
	Reclaim func(t *testing.T)
	// Records returns the keys of every record the store physically
	// holds in scope, whatever its state (claimed, completed, released,
	// past its retention), sorted.
	Records func(t *testing.T, scope string) []string
}

func needRetained(t *testing.T, tg Target) *Retained {
	t.Helper()
	if tg.Retained == nil || tg.Retained.Reclaim == nil || tg.Retained.Records == nil {
		t.Skip("idempotencytest: the Target does not reach what the store keeps of its records (Retained)")
	}
	return tg.Retained
}

// testRecordsGoAfterRetention: records of many keys (completed, failed
// for good, released after an error, claimed and abandoned) whose
// retention ended leave nothing in the store once it has reclaimed them,
// and their keys run as new; records still inside their retention, and a
// live claim, are kept and still answer as before.
func testRecordsGoAfterRetention(t *testing.T, tg Target) {
	r := needRetained(t, tg)
	ctx := ctxT(t)
	scope := fmt.Sprintf("idemtest/%s/%d", t.Name(), time.Now().UnixNano())
	req := func(group string, i int) idempotency.Request {
		return idempotency.Request{Scope: scope, Key: fmt.Sprintf("%s-%03d", group, i), Fingerprint: idempotency.Fingerprint([]byte(group))}
	}
	const released, abandoned, failed, completed, kept, claimed = 30, 30, 30, 90, 10, 10
	// Released records use a claim as short as their retention: a store
	// may keep a released record's fence until its claim would have
	// ended. Completed and failed ones claim for longer than a busy
	// machine's pause between Do's claim and its completion (a claim lost
	// first fails Do), and end with their retention from the completion.
	release := newKeeper(t, tg.Store, &idempotency.Options{Retention: tg.Unit, ClaimTTL: tg.Unit})
	short := newKeeper(t, tg.Store, &idempotency.Options{Retention: tg.Unit, ClaimTTL: max(tg.Unit, 10*time.Second)})
	long := newKeeper(t, tg.Store, &idempotency.Options{Retention: time.Hour})
	var gone, done []idempotency.Request // done: completed and failed, judged absent once their retention ends
	var keep []string
	fences := map[string]uint64{}
	// run runs rq on k once; fn fails with err (nil: it succeeds).
	run := func(k *idempotency.Keeper, rq idempotency.Request, err error) {
		t.Helper()
		res, got := k.Do(ctx, rq, func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
			fences[rq.Key] = c.Fence()
			return []byte("v " + rq.Key), err
		})
		var fe *idempotency.FinalError
		switch {
		case res.Replayed:
			t.Fatalf("Do(%s) = %+v, want a first run", rq.Key, res)
		case err == nil && got != nil:
			t.Fatalf("Do(%s): %v", rq.Key, got)
		case errors.As(err, &fe) && !errors.As(got, &fe):
			t.Fatalf("Do(%s): %v, want a *FinalError", rq.Key, got)
		case err != nil && got == nil:
			t.Fatalf("Do(%s) succeeded, want %v", rq.Key, err)
		}
	}
	// Those whose retention ends first are written first: once the last
	// completed record is past its retention, every other one is too.
	for i := range released {
		rq := req("released", i)
		run(release, rq, errBoom)
		gone = append(gone, rq)
	}
	for i := range abandoned {
		rq := req("abandoned", i)
		b, err := tg.Store.Begin(ctx, driver.Begin{ID: rq.ID(), Fingerprint: rq.Fingerprint, Token: idempotency.NewToken(), ClaimTTL: tg.Unit, Retention: tg.Unit})
		if err != nil || b.State != driver.Claimed {
			t.Fatalf("Begin(%s) = %+v, %v; want a claim", rq.Key, b, err)
		}
		gone = append(gone, rq)
		done = append(done, rq)
	}
	for i := range failed {
		rq := req("failed", i)
		run(short, rq, idempotency.Final(errors.New("declined")))
		gone = append(gone, rq)
		done = append(done, rq)
	}
	for i := range completed {
		rq := req("completed", i)
		run(short, rq, nil)
		gone = append(gone, rq)
		done = append(done, rq)
	}
	for i := range kept {
		rq := req("kept", i)
		run(long, rq, nil)
		keep = append(keep, rq.Key)
	}
	// Live claims: half of them claimed for an hour, half claimed for
	// less than their retention and renewed for an hour.
	for i := range claimed {
		rq := req("claimed", i)
		tok, ttl := idempotency.NewToken(), time.Hour
		if i%2 == 1 {
			ttl = max(tg.Unit/2, time.Millisecond)
		}
		b, err := tg.Store.Begin(ctx, driver.Begin{ID: rq.ID(), Fingerprint: rq.Fingerprint, Token: tok, ClaimTTL: ttl, Retention: tg.Unit})
		if err != nil || b.State != driver.Claimed {
			t.Fatalf("Begin(%s) = %+v, %v; want a claim", rq.Key, b, err)
		}
		if i%2 == 1 {
			if err := tg.Store.Renew(ctx, rq.ID(), tok.Reveal(), b.Fence, time.Hour); errors.Is(err, idempotency.ErrClaimLost) {
				// A loaded machine let the short claim lapse first: claim it
				// for an hour instead.
				b, err = tg.Store.Begin(ctx, driver.Begin{ID: rq.ID(), Fingerprint: rq.Fingerprint, Token: tok, ClaimTTL: time.Hour, Retention: tg.Unit})
				if err != nil || b.State != driver.Claimed {
					t.Fatalf("Begin(%s) again = %+v, %v; want a claim", rq.Key, b, err)
				}
			} else if err != nil {
				t.Fatalf("Renew(%s): %v", rq.Key, err)
			}
		}
		keep = append(keep, rq.Key)
	}
	slices.Sort(keep)
	if got := r.Records(t, scope); !containsAll(got, keep) {
		t.Fatalf("Records lists %d keys (%q...), not all %d records still inside their retention: the hook sees nothing", len(got), first(got), len(keep))
	}
	// The store's own judgement: each record is absent once its
	// retention ended (a released one is absent at once).
	within := 10*tg.Unit + 10*time.Second
	for _, rq := range done {
		waitFor(t, within, "the end of "+rq.Key+"'s retention", func() bool { return !inspect(t, tg.Direct, rq.ID()).Exists })
	}
	var got []string
	for deadline := time.Now().Add(within); ; {
		r.Reclaim(t)
		if got = r.Records(t, scope); slices.Equal(got, keep) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the retention of %d records ended and the store reclaimed them, it keeps %d records in their scope (%q...), want only the %d still inside their retention or claimed",
				len(gone), len(got), first(extra(got, keep)), len(keep))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, rq := range gone {
		wantAbsent(t, tg.Direct, rq.ID())
	}
	for i := range kept {
		rq := req("kept", i)
		wantCompleted(t, tg.Direct, rq, "v "+rq.Key)
		if res := do(t, long, rq, func(context.Context, *idempotency.Claim) ([]byte, error) { return nil, errors.New("ran again") }); !res.Replayed {
			t.Fatalf("%s inside its retention: %+v, want a replay", rq.Key, res)
		}
	}
	for i := range claimed {
		rq := req("claimed", i)
		if rec := inspect(t, tg.Direct, rq.ID()); !rec.Exists || rec.Completed || rec.ClaimTTL <= 0 {
			t.Fatalf("the live claim %s after reclaiming: %+v", rq.Key, rec)
		}
		b, err := tg.Store.Begin(ctx, driver.Begin{ID: rq.ID(), Fingerprint: rq.Fingerprint, Token: idempotency.NewToken(), ClaimTTL: time.Second, Retention: time.Hour})
		if err != nil || b.State != driver.InProgress {
			t.Fatalf("a duplicate of the live claim %s: %+v, %v; want it in progress", rq.Key, b, err)
		}
	}
	// A reclaimed key runs as new, with a fence above its last.
	for i := range 5 {
		rq := req("completed", i)
		old := fences[rq.Key]
		run(short, rq, nil)
		if fences[rq.Key] <= old {
			t.Fatalf("%s after its record was reclaimed: fence %d, not above %d", rq.Key, fences[rq.Key], old)
		}
	}
}

func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// extra returns the keys of got that are not in want.
func extra(got, want []string) []string {
	var out []string
	for _, g := range got {
		if !slices.Contains(want, g) {
			out = append(out, g)
		}
	}
	return out
}

func first(keys []string) []string { return keys[:min(len(keys), 3)] }
