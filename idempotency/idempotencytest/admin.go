package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// adminCases are the cases of stores whose view implements
// idempotency.Admin; Run leaves them out for other stores.
var adminCases = []struct {
	name string
	fn   func(t *testing.T, tg Target, a idempotency.Admin)
}{
	{"AdminResolveUnknownThenReplay", testAdminResolve},
	{"AdminReleaseUnknownThenRun", testAdminRelease},
	{"AdminStaleFenceRefused", testAdminStale},
	{"AdminLiveClaimRefusedUnlessForced", testAdminLive},
	{"AdminListFilters", testAdminList},
	{"AdminInvalidInputChangesNothing", testAdminInvalid},
}

// claimDirect claims req on s with a fresh token and the given claim TTL
// (a retention of an hour), as an executor would, and returns the token
// and fence.
func claimDirect(t *testing.T, s idempotency.Store, req idempotency.Request, ttl time.Duration) (idempotency.Token, uint64) {
	t.Helper()
	tok := idempotency.NewToken()
	b, err := s.Begin(ctxT(t), driver.Begin{ID: req.ID(), Fingerprint: req.Fingerprint, Token: tok,
		ClaimTTL: ttl, Retention: time.Hour})
	if err != nil || b.State != driver.Claimed {
		t.Fatalf("Begin: %+v %v, want claimed", b, err)
	}
	return tok, b.Fence
}

// abandon claims req with a claim of one Unit that is never renewed, and
// waits until it expired on the store's clock: its outcome is unknown.
func abandon(t *testing.T, tg Target, req idempotency.Request) (idempotency.Token, uint64) {
	t.Helper()
	tok, fence := claimDirect(t, tg.Direct, req, tg.Unit)
	waitFor(t, 30*time.Second, "the claim's expiry on the store", func() bool {
		return inspect(t, tg.Direct, req.ID()).State() == idempotency.StateUnknown
	})
	return tok, fence
}

func testAdminResolve(t *testing.T, tg Target, a idempotency.Admin) {
	req := request(t, "a")
	tok, fence := abandon(t, tg, req)
	k := newKeeper(t, tg.Direct, nil)
	c := &counter{value: "ran"}
	if _, err := k.Do(ctxT(t), req, c.fn); !errors.Is(err, idempotency.ErrOutcomeUnknown) {
		t.Fatalf("Do on the abandoned record: %v, want ErrOutcomeUnknown", err)
	}
	if err := k.Resolve(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}, idempotency.Outcome{Value: []byte("reconciled")}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	rec := wantCompleted(t, tg.Direct, req, "reconciled")
	if rec.Fence != fence {
		t.Fatalf("resolved record's fence %d, want %d (unchanged)", rec.Fence, fence)
	}
	if r := do(t, k, req, c.fn); !r.Replayed || string(r.Value) != "reconciled" || c.runs() != 0 {
		t.Fatalf("after Resolve: %+v, runs %d; want the resolved value replayed", r, c.runs())
	}
	// The stalled executor's late completion does not stand.
	if err := tg.Direct.Complete(ctxT(t), req.ID(), tok.Reveal(), fence, idempotency.Outcome{Value: []byte("late")}, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("late completion after Resolve: %v, want ErrClaimLost", err)
	}
	wantCompleted(t, tg.Direct, req, "reconciled")
	// Settled once, it is not settled again.
	if err := a.Resolve(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}, idempotency.Outcome{Value: []byte("x")}, time.Hour); !errors.Is(err, idempotency.ErrCompleted) {
		t.Fatalf("second Resolve: %v, want ErrCompleted", err)
	}
	if err := a.ForceRelease(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}); !errors.Is(err, idempotency.ErrCompleted) {
		t.Fatalf("ForceRelease of a completed record: %v, want ErrCompleted", err)
	}
	wantCompleted(t, tg.Direct, req, "reconciled")

	// A resolved failure replays as a *FinalError.
	req2 := request(t, "b")
	_, fence2 := abandon(t, tg, req2)
	if err := a.Resolve(ctxT(t), idempotency.Settle{ID: req2.ID(), Fence: fence2},
		idempotency.Outcome{Value: []byte("v"), Failed: true, Message: "card declined"}, time.Hour); err != nil {
		t.Fatalf("Resolve with a failure: %v", err)
	}
	res, err := k.Do(ctxT(t), req2, c.fn)
	var fe *idempotency.FinalError
	if !errors.As(err, &fe) || err.Error() != "card declined" || !res.Replayed || string(res.Value) != "v" || c.runs() != 0 {
		t.Fatalf("after resolving a failure: %+v %v", res, err)
	}
}

func testAdminRelease(t *testing.T, tg Target, a idempotency.Admin) {
	req := request(t, "a")
	tok, fence := abandon(t, tg, req)
	if err := newKeeper(t, tg.Direct, nil).ForceRelease(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if err := a.ForceRelease(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("second ForceRelease: %v, want ErrNotFound", err)
	}
	// The next request runs, under a greater fence.
	var got uint64
	k := newKeeper(t, tg.Direct, nil)
	r := do(t, k, req, func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		got = c.Fence()
		return []byte("again"), nil
	})
	if r.Replayed || string(r.Value) != "again" || got <= fence {
		t.Fatalf("after ForceRelease: %+v, fence %d; want a run with a fence above %d", r, got, fence)
	}
	// The stalled executor's late completion does not stand.
	if err := tg.Direct.Complete(ctxT(t), req.ID(), tok.Reveal(), fence, idempotency.Outcome{Value: []byte("late")}, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("late completion after ForceRelease: %v, want ErrClaimLost", err)
	}
	wantCompleted(t, tg.Direct, req, "again")
}

func testAdminStale(t *testing.T, tg Target, a idempotency.Admin) {
	req := request(t, "a")
	_, fence := abandon(t, tg, req)
	before := inspect(t, tg.Direct, req.ID())
	for _, f := range []uint64{fence - 1, fence + 1} {
		s := idempotency.Settle{ID: req.ID(), Fence: f, Force: true}
		if err := a.Resolve(ctxT(t), s, idempotency.Outcome{Value: []byte("x")}, time.Hour); !errors.Is(err, idempotency.ErrChanged) {
			t.Fatalf("Resolve with fence %d (record has %d): %v, want ErrChanged", f, fence, err)
		}
		if err := a.ForceRelease(ctxT(t), s); !errors.Is(err, idempotency.ErrChanged) {
			t.Fatalf("ForceRelease with fence %d (record has %d): %v, want ErrChanged", f, fence, err)
		}
	}
	// An attempt recovers the record meanwhile: the fence the operator
	// inspected is stale.
	k := newKeeper(t, tg.Direct, nil)
	if _, err := k.Recover(ctxT(t), req, (&counter{value: "recovered"}).fn); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	after := wantCompleted(t, tg.Direct, req, "recovered")
	if after.Fence <= before.Fence {
		t.Fatalf("recovered fence %d not above %d", after.Fence, before.Fence)
	}
	if err := a.Resolve(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}, idempotency.Outcome{Value: []byte("x")}, time.Hour); !errors.Is(err, idempotency.ErrChanged) {
		t.Fatalf("Resolve after a takeover: %v, want ErrChanged", err)
	}
	if err := a.ForceRelease(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}); !errors.Is(err, idempotency.ErrChanged) {
		t.Fatalf("ForceRelease after a takeover: %v, want ErrChanged", err)
	}
	wantCompleted(t, tg.Direct, req, "recovered")
	// No record at all.
	missing := request(t, "missing")
	if err := a.Resolve(ctxT(t), idempotency.Settle{ID: missing.ID(), Fence: fence}, idempotency.Outcome{}, time.Hour); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Resolve of a missing record: %v, want ErrNotFound", err)
	}
	if err := a.ForceRelease(ctxT(t), idempotency.Settle{ID: missing.ID(), Fence: fence}); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("ForceRelease of a missing record: %v, want ErrNotFound", err)
	}
	wantAbsent(t, tg.Direct, missing.ID())
}

func testAdminLive(t *testing.T, tg Target, a idempotency.Admin) {
	req := request(t, "a")
	tok, fence := claimDirect(t, tg.Direct, req, time.Minute)
	s := idempotency.Settle{ID: req.ID(), Fence: fence}
	var ip *idempotency.InProgressError
	err := a.Resolve(ctxT(t), s, idempotency.Outcome{Value: []byte("x")}, time.Hour)
	if !errors.As(err, &ip) || !errors.Is(err, idempotency.ErrInProgress) || ip.RetryAfter <= 0 {
		t.Fatalf("Resolve of a live claim: %v, want an *InProgressError", err)
	}
	if err := a.ForceRelease(ctxT(t), s); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("ForceRelease of a live claim: %v, want ErrInProgress", err)
	}
	if r := inspect(t, tg.Direct, req.ID()); r.State() != idempotency.StateInProgress || r.Fence != fence {
		t.Fatalf("record after refusals: %+v, want the live claim unchanged", r)
	}
	if err := tg.Direct.Renew(ctxT(t), req.ID(), tok.Reveal(), fence, time.Minute); err != nil {
		t.Fatalf("holder's renewal after refusals: %v", err)
	}
	// Forced: the holder loses its claim.
	s.Force = true
	if err := a.ForceRelease(ctxT(t), s); err != nil {
		t.Fatalf("forced ForceRelease: %v", err)
	}
	wantAbsent(t, tg.Direct, req.ID())
	if err := tg.Direct.Renew(ctxT(t), req.ID(), tok.Reveal(), fence, time.Minute); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("holder's renewal after a forced release: %v, want ErrClaimLost", err)
	}
	if err := tg.Direct.Complete(ctxT(t), req.ID(), tok.Reveal(), fence, idempotency.Outcome{}, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("holder's completion after a forced release: %v, want ErrClaimLost", err)
	}
	wantAbsent(t, tg.Direct, req.ID())

	// A forced Resolve of a live claim records the result.
	req2 := request(t, "b")
	tok2, fence2 := claimDirect(t, tg.Direct, req2, time.Minute)
	if err := a.Resolve(ctxT(t), idempotency.Settle{ID: req2.ID(), Fence: fence2, Force: true}, idempotency.Outcome{Value: []byte("forced")}, time.Hour); err != nil {
		t.Fatalf("forced Resolve: %v", err)
	}
	wantCompleted(t, tg.Direct, req2, "forced")
	if err := tg.Direct.Complete(ctxT(t), req2.ID(), tok2.Reveal(), fence2, idempotency.Outcome{Value: []byte("late")}, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("holder's completion after a forced Resolve: %v, want ErrClaimLost", err)
	}
	if err := tg.Direct.Release(ctxT(t), req2.ID(), tok2.Reveal()); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("holder's release after a forced Resolve: %v, want ErrClaimLost", err)
	}
	wantCompleted(t, tg.Direct, req2, "forced")
}

func testAdminList(t *testing.T, tg Target, a idempotency.Admin) {
	prefix := fmt.Sprintf("idemtest/%s/%d/", t.Name(), time.Now().UnixNano())
	mk := func(scope, key string) idempotency.Request {
		return idempotency.Request{Scope: prefix + scope, Key: key, Fingerprint: "fp-" + key}
	}
	done1, done2 := mk("a", "done-1"), mk("b", "done-2")
	live, unknown, released := mk("a", "live"), mk("c", "unknown"), mk("c", "released")
	k := newKeeper(t, tg.Direct, nil)
	for _, r := range []idempotency.Request{done1, done2} {
		do(t, k, r, (&counter{value: "v-" + r.Key}).fn)
	}
	claimDirect(t, tg.Direct, live, time.Minute)
	tok, _ := claimDirect(t, tg.Direct, released, time.Minute)
	if err := tg.Direct.Release(ctxT(t), released.ID(), tok.Reveal()); err != nil {
		t.Fatal(err)
	}
	abandon(t, tg, unknown)

	keys := func(f idempotency.Filter) []string {
		t.Helper()
		recs, err := a.List(ctxT(t), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		var out []string
		for _, r := range recs {
			if !f.Match(r) || !r.Exists {
				t.Fatalf("List(%+v) returned %+v, which does not match", f, r)
			}
			want := inspect(t, tg.Direct, r.ID)
			if want.Fence != r.Fence || want.Completed != r.Completed || want.Fingerprint != r.Fingerprint ||
				string(want.Outcome.Value) != string(r.Outcome.Value) {
				t.Fatalf("List gave %+v, Inspect %+v", r, want)
			}
			out = append(out, r.Key)
		}
		return out
	}
	same := func(got []string, want ...string) bool {
		if len(got) != len(want) {
			return false
		}
		seen := map[string]int{}
		for _, g := range got {
			seen[g]++
		}
		for _, w := range want {
			if seen[w] != 1 {
				return false
			}
		}
		return true
	}
	cases := []struct {
		f    idempotency.Filter
		want []string
	}{
		{idempotency.Filter{ScopePrefix: prefix}, []string{"done-1", "done-2", "live", "unknown"}},
		{idempotency.Filter{ScopePrefix: prefix, State: idempotency.StateDone}, []string{"done-1", "done-2"}},
		{idempotency.Filter{ScopePrefix: prefix, State: idempotency.StateInProgress}, []string{"live"}},
		{idempotency.Filter{ScopePrefix: prefix, State: idempotency.StateUnknown}, []string{"unknown"}},
		{idempotency.Filter{ScopePrefix: prefix + "a"}, []string{"done-1", "live"}},
		{idempotency.Filter{ScopePrefix: prefix + "zz"}, nil},
	}
	for _, c := range cases {
		if got := keys(c.f); !same(got, c.want...) {
			t.Fatalf("List(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	if got := keys(idempotency.Filter{ScopePrefix: prefix, Limit: 3}); len(got) != 3 {
		t.Fatalf("List with limit 3 gave %v", got)
	}
	for _, f := range []idempotency.Filter{{Limit: -1}, {Limit: idempotency.MaxListLimit + 1}, {State: 9}} {
		if _, err := a.List(ctxT(t), f); !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("List(%+v): %v, want ErrInvalid", f, err)
		}
	}
}

func testAdminInvalid(t *testing.T, tg Target, a idempotency.Admin) {
	req := request(t, "a")
	_, fence := abandon(t, tg, req)
	before := inspect(t, tg.Direct, req.ID())
	bad := []idempotency.Settle{
		{ID: req.ID()}, // fence 0
		{ID: req.ID(), Fence: 1 << 63},
		{ID: idempotency.ID{Scope: "", Key: req.Key}, Fence: fence},
		{ID: idempotency.ID{Scope: req.Scope, Key: "bad\nkey"}, Fence: fence},
	}
	for _, s := range bad {
		if err := a.Resolve(ctxT(t), s, idempotency.Outcome{}, time.Hour); !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("Resolve(%+v): %v, want ErrInvalid", s, err)
		}
		if err := a.ForceRelease(ctxT(t), s); !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("ForceRelease(%+v): %v, want ErrInvalid", s, err)
		}
	}
	for _, ret := range []time.Duration{0, -time.Second, idempotency.MaxRetention + time.Hour} {
		if err := a.Resolve(ctxT(t), idempotency.Settle{ID: req.ID(), Fence: fence}, idempotency.Outcome{}, ret); !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("Resolve with retention %v: %v, want ErrInvalid", ret, err)
		}
	}
	if after := inspect(t, tg.Direct, req.ID()); after.State() != idempotency.StateUnknown || after.Fence != before.Fence {
		t.Fatalf("record after invalid calls: %+v, want unchanged %+v", after, before)
	}
}
