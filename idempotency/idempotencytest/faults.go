package idempotencytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/driver"
)

func testUnreachable(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, nil)
	c := &counter{value: "v"}
	tg.Faults.Cut()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	_, err := k.Do(ctx, req, c.fn)
	if !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Do with the store cut off: %v, want ErrUnavailable", err)
	}
	if c.runs() != 0 {
		t.Fatal("fn ran without a claim")
	}
	if _, err := tg.Store.Inspect(ctx, req.ID()); !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Inspect with the store cut off: %v, want ErrUnavailable", err)
	}
	wantAbsent(t, tg.Direct, req.ID())
	tg.Faults.Heal()
	waitFor(t, 30*time.Second, "a healed Do", func() bool {
		_, err := k.Do(ctxT(t), req, c.fn)
		return err == nil
	})
	if c.runs() != 1 {
		t.Fatalf("fn ran %d times, want 1", c.runs())
	}
	wantCompleted(t, tg.Direct, req, "v")
}

func testLostBegin(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: time.Minute})
	c := &counter{value: "v"}
	tg.Faults.DropReplies()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
		defer cancel()
		_, err := k.Do(ctx, req, c.fn)
		done <- err
	}()
	// The claim applies; its reply is lost.
	waitFor(t, 30*time.Second, "the claim's application", func() bool { return inspect(t, tg.Direct, req.ID()).Exists })
	if err := <-done; !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Do with replies lost: %v, want ErrUnavailable", err)
	}
	if c.runs() != 0 {
		t.Fatal("fn ran without a claim")
	}
	// Do drops the unanswered claim in the background rather than leave
	// it blocking the key for the claim's minute.
	tg.Faults.Heal()
	waitFor(t, 30*time.Second, "the lost claim's release", func() bool { return !inspect(t, tg.Direct, req.ID()).Exists })
	// (The first calls after healing may fail on connections the fault
	// broke; they must not run fn.)
	var r idempotency.Result
	waitFor(t, 30*time.Second, "a healed Do", func() bool {
		var err error
		r, err = k.Do(ctxT(t), req, c.fn)
		if err != nil && !errors.Is(err, idempotency.ErrUnavailable) {
			t.Fatalf("retry: %v", err)
		}
		return err == nil
	})
	if r.Replayed || c.runs() != 1 {
		t.Fatalf("retry: %+v, runs %d", r, c.runs())
	}
}

func testLostComplete(t *testing.T, tg Target) {
	req := request(t, "a")
	k := newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: 3 * time.Second})
	healed := make(chan struct{})
	res, err := k.Do(ctxT(t), req, func(context.Context, *idempotency.Claim) ([]byte, error) {
		tg.Faults.DropReplies()
		go func() {
			defer close(healed)
			waitFor(t, 30*time.Second, "the completion's application", func() bool {
				return inspect(t, tg.Direct, req.ID()).Completed
			})
			tg.Faults.Heal()
		}()
		return []byte("done"), nil
	})
	<-healed
	if err != nil || res.Replayed || string(res.Value) != "done" {
		t.Fatalf("Do whose completion reply was lost: %+v %v, want the result reconciled", res, err)
	}
	wantCompleted(t, tg.Direct, req, "done")
}

// stall starts Do on k whose fn stalls (ignores its context, as a paused
// process would) until proceed closes, then returns "A". It returns once
// fn runs, with fn's claim.
func stall(t *testing.T, k *idempotency.Keeper, req idempotency.Request) (claim *idempotency.Claim, proceed func(), result func() (idempotency.Result, error)) {
	claims := make(chan *idempotency.Claim, 1)
	gate := make(chan struct{})
	type out struct {
		r   idempotency.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := k.Do(ctxT(t), req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
			claims <- c
			<-gate
			return []byte("A"), nil
		})
		done <- out{r, err}
	}()
	select {
	case claim = <-claims:
	case o := <-done:
		t.Fatalf("Do returned before fn ran: %+v %v", o.r, o.err)
	}
	var once sync.Once
	return claim, func() { once.Do(func() { close(gate) }) }, func() (idempotency.Result, error) {
		o := <-done
		return o.r, o.err
	}
}

// expireClaim cuts the store off from a stalled holder until its claim
// expired on the store's clock.
func expireClaim(t *testing.T, tg Target, req idempotency.Request, a *idempotency.Claim) {
	t.Helper()
	tg.Faults.Cut()
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled claim's validity did not run out")
	}
	if !errors.Is(a.Err(), idempotency.ErrClaimLost) {
		t.Fatalf("stalled claim's Err = %v, want ErrClaimLost", a.Err())
	}
	waitFor(t, 30*time.Second, "the claim's expiry on the store", func() bool {
		r := inspect(t, tg.Direct, req.ID())
		return r.Exists && !r.Completed && r.ClaimTTL == 0
	})
}

// testStaleClaimDuringTakeover: a live claim renews only with its own
// token and fence; once it was taken over, and while the new claim runs,
// the old one can neither renew nor complete, and the record ends with the
// new claim's outcome.
func testStaleClaimDuringTakeover(t *testing.T, tg Target) {
	ctx := ctxT(t)
	s := tg.Direct
	req := request(t, "a")
	id := req.ID()
	begin := func(who string, tok idempotency.Token, takeover bool) driver.Begun {
		t.Helper()
		b, err := s.Begin(ctx, driver.Begin{ID: id, Fingerprint: req.Fingerprint, Token: tok,
			ClaimTTL: tg.Unit, Retention: time.Hour, Takeover: takeover})
		if err != nil || b.State != driver.Claimed {
			t.Fatalf("%s's Begin: %+v, %v; want Claimed", who, b, err)
		}
		return b
	}
	ta := idempotency.NewToken()
	a := begin("A", ta, false)
	if err := s.Renew(ctx, id, idempotency.NewToken().Reveal(), a.Fence, tg.Unit); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("renew of A's live claim with another token: %v, want ErrClaimLost", err)
	}
	if err := s.Renew(ctx, id, ta.Reveal(), a.Fence+1, tg.Unit); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("renew of A's live claim with another fence: %v, want ErrClaimLost", err)
	}
	// A stalls past its claim; B takes the record over.
	waitFor(t, 30*time.Second, "A's claim to expire", func() bool {
		r := inspect(t, s, id)
		return r.Exists && !r.Completed && r.ClaimTTL == 0
	})
	tb := idempotency.NewToken()
	b := begin("B", tb, true)
	if b.Fence <= a.Fence {
		t.Fatalf("B's fence %d not above A's %d", b.Fence, a.Fence)
	}
	// A wakes up while B runs.
	if err := s.Renew(ctx, id, ta.Reveal(), a.Fence, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A's renew while B holds the claim: %v, want ErrClaimLost", err)
	}
	if err := s.Complete(ctx, id, ta.Reveal(), a.Fence, idempotency.Outcome{Value: []byte("A")}, time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A's completion while B holds the claim: %v, want ErrClaimLost", err)
	}
	if r := inspect(t, s, id); r.Completed || r.Fence != b.Fence || r.ClaimTTL > tg.Unit {
		t.Fatalf("after A's late calls the record is %+v; want B's claim (fence %d, claim TTL at most %v), not completed", r, b.Fence, tg.Unit)
	}
	if err := s.Complete(ctx, id, tb.Reveal(), b.Fence, idempotency.Outcome{Value: []byte("B")}, time.Hour); err != nil {
		t.Fatalf("B's completion: %v", err)
	}
	wantCompleted(t, s, req, "B")
}

func testAbandoned(t *testing.T, tg Target) {
	req := request(t, "a")
	a, proceed, result := stall(t, newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: tg.Unit}), req)
	defer proceed()
	expireClaim(t, tg, req, a)

	c := &counter{value: "B"}
	k := newKeeper(t, tg.Direct, nil)
	_, err := k.Do(ctxT(t), req, c.fn)
	var ue *idempotency.UnknownError
	if !errors.As(err, &ue) || !errors.Is(err, idempotency.ErrOutcomeUnknown) || ue.Ran || ue.Fence != a.Fence() {
		t.Fatalf("Do on an abandoned claim: %v, want *UnknownError for fence %d", err, a.Fence())
	}
	if c.runs() != 0 {
		t.Fatal("fn ran on an abandoned claim without Recover")
	}
	other := req
	other.Fingerprint = "changed"
	if _, err := k.Do(ctxT(t), other, c.fn); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("other input on an abandoned claim: %v, want ErrMismatch", err)
	}
	// Nobody took over: the stalled executor's late result is accepted.
	tg.Faults.Heal()
	proceed()
	if r, err := result(); err != nil || string(r.Value) != "A" {
		t.Fatalf("late completion without takeover: %+v %v, want accepted", r, err)
	}
	wantCompleted(t, tg.Direct, req, "A")
	if r := do(t, k, req, c.fn); !r.Replayed || string(r.Value) != "A" {
		t.Fatalf("after the late completion: %+v", r)
	}
}

func testStalled(t *testing.T, tg Target) {
	req := request(t, "a")
	a, proceed, result := stall(t, newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: tg.Unit}), req)
	defer proceed()
	expireClaim(t, tg, req, a)

	// B recovers: it takes the claim over with a greater fence and runs.
	var bFence uint64
	b := newKeeper(t, tg.Direct, nil)
	res, err := b.Recover(ctxT(t), req, func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		bFence = c.Fence()
		return []byte("B"), nil
	})
	if err != nil || res.Replayed || string(res.Value) != "B" {
		t.Fatalf("B's Recover: %+v %v", res, err)
	}
	if bFence <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", bFence, a.Fence())
	}
	rec := wantCompleted(t, tg.Direct, req, "B")
	if rec.Fence != bFence {
		t.Fatalf("record fence %d, want B's %d", rec.Fence, bFence)
	}
	// A wakes up and completes: refused, and its caller is told so.
	tg.Faults.Heal()
	proceed()
	r, err := result()
	if !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A's late completion: %+v %v, want ErrClaimLost", r, err)
	}
	if r.Value != nil || r.Replayed {
		t.Fatalf("A's Result %+v, want none with the error (the store refused it)", r)
	}
	wantCompleted(t, tg.Direct, req, "B")
	// Every later request replays B, through any policy.
	k := newKeeper(t, tg.Direct, &idempotency.Options{Abandoned: idempotency.Rerun})
	c := &counter{value: "C"}
	if r := do(t, k, req, c.fn); !r.Replayed || string(r.Value) != "B" || c.runs() != 0 {
		t.Fatalf("after both: %+v, runs %d; want B replayed", r, c.runs())
	}
	// The stale claim cannot be renewed or released either.
	if err := tg.Direct.Renew(ctxT(t), req.ID(), a.Token().Reveal(), a.Fence(), time.Second); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A's renew: %v, want ErrClaimLost", err)
	}
	if err := tg.Direct.Release(ctxT(t), req.ID(), a.Token().Reveal()); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A's release: %v, want ErrClaimLost", err)
	}
	wantCompleted(t, tg.Direct, req, "B")

	// The Rerun policy takes an abandoned claim over by itself.
	req2 := request(t, "b")
	a2, proceed2, result2 := stall(t, newKeeper(t, tg.Store, &idempotency.Options{ClaimTTL: tg.Unit}), req2)
	defer proceed2()
	expireClaim(t, tg, req2, a2)
	c2 := &counter{value: "B2"}
	if r := do(t, newKeeper(t, tg.Direct, &idempotency.Options{Abandoned: idempotency.Rerun}), req2, c2.fn); r.Replayed || c2.runs() != 1 {
		t.Fatalf("Rerun on an abandoned claim: %+v, runs %d", r, c2.runs())
	}
	tg.Faults.Heal()
	proceed2()
	if _, err := result2(); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("A2's late completion: %v, want ErrClaimLost", err)
	}
	wantCompleted(t, tg.Direct, req2, "B2")
}
