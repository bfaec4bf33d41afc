package proof

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

func init() {
	register(&workload{
		name:     "idempotency",
		summary:  "workers retry requests with the same keys under dropped replies and paused executors, now and then with other input, take abandoned claims over, and run executors that stall past their claim's TTL; each key's effect happens once, every answer for a key is the same and made for the request's input, and a claim taken over is never renewed or completed",
		supports: notOnEtcd("idempotency records"),
		setup:    ledgerSetup,
		worker:   bothModes(idemLoop),
		check:    idemCheck,
	})
}

// notOnEtcd: the primitive is not offered on etcd.
func notOnEtcd(what string) func(storeurl.Kind) string {
	return func(k storeurl.Kind) string {
		if k == storeurl.Etcd {
			return "etcd keeps leases only; tenure does not offer " + what + " on it"
		}
		return ""
	}
}

// bothModes runs loop for the guarded and the control mode side by side,
// so that a pause or a kill hits both alike.
func bothModes(loop func(ctx context.Context, w *workerEnv, mode string) error) func(context.Context, *workerEnv) error {
	return func(ctx context.Context, w *workerEnv) error {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, mode := range []string{Guarded, Control} {
			wg.Go(func() { errs[i] = loop(ctx, w, mode) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
}

// views returns the store's primitive views (nil where it has none).
func (w *workerEnv) idempotencyStore() idempotency.Store {
	switch {
	case w.env.Mem != nil:
		return w.env.Mem.Idempotency()
	case w.env.SQLite != nil:
		return w.env.SQLite.Idempotency()
	case w.env.PG != nil:
		return w.env.PG.Idempotency()
	case w.env.Redis != nil:
		return w.env.Redis.Idempotency()
	}
	return nil
}

func (w *workerEnv) sessionStore() session.Store {
	switch {
	case w.env.Mem != nil:
		return w.env.Mem.Sessions()
	case w.env.SQLite != nil:
		return w.env.SQLite.Sessions()
	case w.env.PG != nil:
		return w.env.PG.Sessions()
	case w.env.Redis != nil:
		return w.env.Redis.Sessions()
	}
	return nil
}

func (w *workerEnv) limitStore() ratelimit.Store {
	switch {
	case w.env.Mem != nil:
		return w.env.Mem.Limits()
	case w.env.SQLite != nil:
		return w.env.SQLite.Limits()
	case w.env.PG != nil:
		return w.env.PG.Limits()
	case w.env.Redis != nil:
		return w.env.Redis.Limits()
	}
	return nil
}

func (w *workerEnv) scheduleStore() schedule.Store {
	switch {
	case w.env.Mem != nil:
		return w.env.Mem.Schedules()
	case w.env.SQLite != nil:
		return w.env.SQLite.Schedules()
	case w.env.PG != nil:
		return w.env.PG.Schedules()
	case w.env.Redis != nil:
		return w.env.Redis.Schedules()
	}
	return nil
}

// The ledger's tables: the business side of the workloads.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS proof_effects (run TEXT NOT NULL, mode TEXT NOT NULL, key TEXT NOT NULL, proc TEXT NOT NULL, fence INTEGER NOT NULL, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS proof_effects_key ON proof_effects (run, mode, key);
CREATE TABLE IF NOT EXISTS proof_records (run TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run, key));
CREATE TABLE IF NOT EXISTS proof_sessions (run TEXT NOT NULL, id TEXT NOT NULL, user TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, id));
CREATE TABLE IF NOT EXISTS proof_admissions (run TEXT NOT NULL, key TEXT NOT NULL, t INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS proof_admissions_key ON proof_admissions (run, key, t);
CREATE TABLE IF NOT EXISTS proof_permits (run TEXT NOT NULL, key TEXT NOT NULL, id TEXT NOT NULL, until INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS proof_permits_key ON proof_permits (run, key, until);
`

func ledgerSetup(ctx context.Context, w *workerEnv) error {
	_, err := w.ledger.DB().ExecContext(ctx, ledgerSchema)
	return err
}

// effects returns the effects recorded in the ledger for mode, by key.
func (w *workerEnv) effects(ctx context.Context, mode string) (map[string][]string, error) {
	rows, err := w.ledger.DB().QueryContext(ctx, `SELECT key, value FROM proof_effects WHERE run = ? AND mode = ?`, w.spec.Prefix, mode)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = append(out[k], v)
	}
	return out, rows.Err()
}

// insertEffect is the statement that records one effect in the ledger.
const insertEffect = `INSERT INTO proof_effects (run, mode, key, proc, fence, value) VALUES (?, ?, ?, ?, ?, ?)`

// addEffect records one effect in the ledger, unguarded (the controls').
func (w *workerEnv) addEffect(ctx context.Context, mode, key string, fence uint64, value string) error {
	_, err := w.ledger.DB().ExecContext(ctx, insertEffect, w.spec.Prefix, mode, key, w.spec.Proc, fence, value)
	return err
}

// idemLoop sends requests for the key of the current time window (every
// worker sends for the same key at the same time: retries and
// duplicates), now and then a late retry of a key of an earlier window,
// drops a quarter of the replies (the client then retries the same key)
// and runs the effect with a think time in which a pause can land. A
// request that finds an earlier attempt abandoned (its executor paused or
// killed past the claim's TTL) reconciles and takes the claim over with
// Keeper.Recover. In the guarded mode a stalled executor of its own
// (staleLoop) runs next to it.
func idemLoop(ctx context.Context, w *workerEnv, mode string) error {
	ttl := w.spec.TTL
	k, err := idempotency.New(w.idempotencyStore(), &idempotency.Options{
		ClaimTTL: ttl, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index)))
	window := idemWindow(w)
	var stale sync.WaitGroup
	if mode == Guarded {
		stale.Go(func() { staleLoop(ctx, w) })
		defer stale.Wait()
	}
	// The effects are recorded by a client of their own: they run inside
	// the request's operation.
	effects := w.rec.sub("/effect")
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		win := (time.Now().UnixNano() - w.spec.Start) / int64(window)
		if win >= 2 && rng.IntN(4) == 0 {
			win -= 1 + rng.Int64N(2) // a late retry of a key sent before
		}
		key := idemKey(mode, win)
		// Now and then a client reuses the key for other input: a request
		// of another fingerprint, which must never get the answer
		// recorded for the first.
		fp := fpSame
		if rng.IntN(8) == 0 {
			fp = fpOther
		}
		in := ""
		if mode == Guarded {
			in = fp
		}
		p := w.rec.Invoke(mode, "do", key, in, 0)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var out string
		if mode == Guarded {
			req := idempotency.Request{Scope: idemScope(w), Key: key, Fingerprint: fp}
			var res idempotency.Result
			// The work reconciles: under the claim's fence it looks for the
			// effect of an earlier attempt before making its own, for a
			// record may run anew after an attempt that made its effect
			// ended without a result (a failed reconciliation releases
			// the claim).
			work := func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
				done := claimed(effects, key, c.Fence(), c.ValidUntil())
				defer done()
				w.sleep(ctx, w.spec.Think)
				v, err := w.reconcile(ctx, effects, key, c.Fence(), fp)
				if err != nil {
					return nil, err
				}
				return []byte(answer(v, c.Fence())), nil
			}
			res, err = k.Do(octx, req, work)
			if u := (*idempotency.UnknownError)(nil); errors.As(err, &u) && !u.Ran {
				// An earlier attempt was abandoned: take it over.
				res, err = k.Recover(octx, req, work)
			}
			out = string(res.Value)
		} else {
			out, err = naiveDo(octx, w, key, effects)
		}
		cancel()
		if err == nil && rng.IntN(4) == 0 {
			err = errDropped // the reply never reached the client, which retries
		}
		p.End(out, 0, err)
		w.sleep(ctx, w.spec.Think/4+time.Duration(rng.Int64N(int64(5*time.Millisecond))))
	}
	return nil
}

// The fingerprints of the guarded requests: most send the same input for
// a key, some other input.
const (
	fpSame  = "a"
	fpOther = "b"
)

// effectValue is the effect of the executor of the claim with fence, for
// a request of fingerprint fp (its last part).
func effectValue(w *workerEnv, fence uint64, fp string) string {
	return fmt.Sprintf("%s/%d/%s", w.spec.Proc, fence, fp)
}

// fingerprintOf is the fingerprint of the request an answer's effect was
// made for.
func fingerprintOf(answer string) string {
	e := effectOf(answer)
	return e[strings.LastIndexByte(e, '/')+1:]
}

// idemWindow is how long the workers send for one key.
func idemWindow(w *workerEnv) time.Duration { return max(w.spec.TTL, 200*time.Millisecond) }

func idemKey(mode string, win int64) string { return mode + "-" + strconv.FormatInt(win, 10) }

func idemScope(w *workerEnv) string { return "proof " + w.spec.Prefix }

// answer is what a request for a key answers: the effect and the fence of
// the claim that recorded it, so that a result recorded by a claim that
// was taken over shows as a second answer.
func answer(effect string, fence uint64) string { return effect + "@" + strconv.FormatUint(fence, 10) }

// effectOf is the effect an answer names.
func effectOf(answer string) string {
	if i := strings.LastIndexByte(answer, '@'); i >= 0 {
		return answer[:i]
	}
	return answer
}

// claimed records that an executor holds the claim with fence on key,
// valid until validUntil (no other claim can be granted before then): from
// now (fn runs only once the claim is granted) until done is called.
func claimed(r *Recorder, key string, fence uint64, validUntil time.Time) (done func()) {
	p := r.Invoke(Guarded, "claim", key, "", fence)
	return func() { p.OK(strconv.FormatInt(validUntil.UnixNano(), 10), fence) }
}

// errReconciled ends an effect that did not run because reconciliation
// found the effect of an earlier attempt.
var errReconciled = errors.New("proof: the effect of an earlier attempt was found")

// reconcile is the work of a request that took an abandoned claim over:
// in one transaction, admit the new claim's fence (so that the abandoned
// executor's late effect is refused from then on) and look for the effect
// of an earlier attempt; if there is none, make the effect. It returns the
// key's effect.
func (w *workerEnv) reconcile(ctx context.Context, effects *Recorder, key string, f uint64, fp string) (string, error) {
	v := effectValue(w, f, fp)
	ep := effects.Invoke(Guarded, "effect", key, v, f)
	found, err := func() (string, error) {
		tx, err := w.ledger.DB().BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer tx.Rollback()
		if err := w.ledger.Tx(tx).Admit(ctx, w.spec.Prefix+key, f); err != nil {
			return "", err
		}
		var found string
		err = tx.QueryRowContext(ctx, `SELECT value FROM proof_effects WHERE run = ? AND mode = ? AND key = ?`, w.spec.Prefix, Guarded, key).Scan(&found)
		switch {
		case err == nil:
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, insertEffect, w.spec.Prefix, Guarded, key, w.spec.Proc, f, v); err != nil {
				return "", err
			}
		default:
			return "", err
		}
		return found, tx.Commit()
	}()
	switch {
	case err != nil:
		ep.End(v, f, err)
		return "", err
	case found != "":
		ep.End("", f, errReconciled)
		return found, nil
	}
	ep.OK(v, f)
	return v, nil
}

// staleLoop is an executor that stalls: it claims the next key through
// the store (as a client without tenure's Keeper does, a service in
// another language through the API, say), and stalls past the claim's
// TTL until another request has taken the claim over but not yet made its
// effect, the window in which only the store's checks of the claim stop
// it. Then it renews the claim, does its work (reconciling, and refused by
// the fence if the new executor's came first) and records its result. The store must
// refuse the renewal and the result once the claim was taken over.
func staleLoop(ctx context.Context, w *workerEnv) {
	st, ttl, window := w.idempotencyStore(), w.spec.TTL, idemWindow(w)
	rec := w.rec.sub("/stale")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w.spec.Index)+1))
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		// The next window's key, before the others send for it: they find
		// the claim live, then abandoned, and take it over.
		key := idemKey(Guarded, (time.Now().UnixNano()-w.spec.Start)/int64(window)+1)
		id := idempotency.ID{Scope: idemScope(w), Key: key}
		tok := idempotency.NewToken()
		p := rec.Invoke(Guarded, "do", key, "", 0)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		out, err := staleAttempt(octx, ctx, w, st, rec, id, tok, ttl, 3*window+ttl)
		cancel()
		p.End(out, 0, err)
		w.sleep(ctx, time.Duration(rng.Int64N(int64(window))))
	}
}

// staleAttempt is one attempt of staleLoop; it waits for a takeover at
// most wait after its claim (or until run ends).
func staleAttempt(ctx, run context.Context, w *workerEnv, st idempotency.Store, rec *Recorder, id idempotency.ID, tok idempotency.Token, ttl, wait time.Duration) (string, error) {
	sent := time.Now()
	b, err := st.Begin(ctx, driver.Begin{ID: id, Fingerprint: fpSame, Token: tok, ClaimTTL: ttl, Retention: 24 * time.Hour, Takeover: true})
	switch {
	case err != nil:
		return "", err
	case b.State == driver.Completed:
		return string(b.Outcome.Value), nil
	case b.State != driver.Claimed:
		return "", idempotency.ErrInProgress
	}
	f := b.Fence
	// No one else can be granted the claim before its TTL has passed on
	// the store; a tenth of it is left for the clocks' drift.
	done := claimed(rec, id.Key, f, sent.Add(b.TTL-b.TTL/10))
	defer done()
	// Stall: past the claim's TTL, then until the record shows a greater
	// fence that has no result yet.
	w.sleep(run, b.TTL)
	for end := time.Now().Add(wait); run.Err() == nil && time.Now().Before(end); w.sleep(run, 2*time.Millisecond) {
		r, err := st.Inspect(ctx, id)
		if err == nil && r.Exists && r.Fence > f {
			break
		}
	}
	rp := rec.Invoke(Guarded, "renew", id.Key, "", f)
	rp.End("", f, st.Renew(ctx, id, tok.Reveal(), f, ttl))
	// The work reconciles as a request that takes a claim over does: this
	// attempt may itself have taken over an abandoned claim.
	v, err := w.reconcile(ctx, rec, id.Key, f, fpSame)
	if err != nil {
		return "", err // refused by the fence: the new executor came first
	}
	a := answer(v, f)
	cp := rec.Invoke(Guarded, "complete", id.Key, a, f)
	err = st.Complete(ctx, id, tok.Reveal(), f, idempotency.Outcome{Value: []byte(a)}, 24*time.Hour)
	cp.End("", f, err)
	if err != nil {
		return "", err
	}
	return a, nil
}

// naiveDo is the control: look the key up, and if there is no answer yet,
// run the effect and store the answer (check, then act).
func naiveDo(ctx context.Context, w *workerEnv, key string, effects *Recorder) (string, error) {
	db := w.ledger.DB()
	var v string
	err := db.QueryRowContext(ctx, `SELECT value FROM proof_records WHERE run = ? AND key = ?`, w.spec.Prefix, key).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	w.sleep(ctx, w.spec.Think)
	v = w.spec.Proc + "/0"
	ep := effects.Invoke(Control, "effect", key, v, 0)
	err = w.addEffect(ctx, Control, key, 0, v)
	ep.End(v, 0, err)
	if err != nil {
		return "", err
	}
	_, err = db.ExecContext(ctx, `INSERT INTO proof_records (run, key, value) VALUES (?, ?, ?)
		ON CONFLICT (run, key) DO UPDATE SET value = excluded.value`, w.spec.Prefix, key, v)
	return v, err
}

func idemCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	ops := h.Select(mode, "do")
	m.countOps(ops)
	effects, err := w.effects(ctx, mode)
	if err != nil {
		m.violate("cannot read the effects: %v", err)
		return m
	}
	answers := map[string]map[string]int{}
	for _, op := range ops {
		if op.Status != OK {
			continue
		}
		if answers[op.Key] == nil {
			answers[op.Key] = map[string]int{}
		}
		answers[op.Key][op.Out]++
	}
	keys := map[string]bool{}
	for k := range answers {
		keys[k] = true
	}
	for k := range effects {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		eff, ans := effects[k], answers[k]
		if len(eff) > 1 {
			m.Duplicates += len(eff) - 1
			m.violate("key %s: the effect happened %d times", k, len(eff))
		}
		if len(ans) > 1 {
			m.Duplicates += len(ans) - 1
			m.violate("key %s: %d different answers %v", k, len(ans), ans)
		}
		if len(ans) > 0 && len(eff) == 0 {
			m.Lost++
			m.violate("key %s: answered, but no effect happened", k)
		}
		if len(ans) == 1 && len(eff) == 1 {
			for a := range ans {
				if effectOf(a) != eff[0] {
					m.violate("key %s: answered %q, but the effect was %q", k, a, eff[0])
				}
			}
		}
	}
	// An answer is the result recorded for the request's own input: a
	// request of another fingerprint gets a mismatch, never a replay.
	for _, op := range ops {
		if op.Status == OK && op.In != "" && fingerprintOf(op.Out) != op.In {
			m.Duplicates++
			m.violate("key %s: a request with fingerprint %q was answered %q, the result recorded for fingerprint %q", op.Key, op.In, op.Out, fingerprintOf(op.Out))
		}
	}
	claims := byKeyMap(h.Select(mode, "claim"))
	// Claims exclude each other: none is granted while another
	// executor's claim is valid and its work not over.
	for k, cs := range claims {
		if a, b, ok := overlappingClaims(cs); ok {
			m.Duplicates++
			m.violate("key %s: %s was granted the claim (fence %d) while %s's claim (fence %d) was valid and its work not over", k, b.Proc, b.Fence, a.Proc, a.Fence)
		}
	}
	// A claim that was taken over must not be renewed or complete.
	for _, f := range []string{"renew", "complete"} {
		for _, op := range h.Select(mode, f) {
			if g, ok := takenOver(op, claims[op.Key]); ok {
				m.StaleAdmitted++
				m.violate("key %s: %s's %s of the claim with fence %d succeeded after the claim with fence %d was granted", op.Key, op.Proc, f, op.Fence, g)
			}
		}
	}
	// Each key's requests and effects, checked as one record, up to the
	// first key that fails (whose history is visualized).
	lin := true
	dos, effs := byKeyMap(ops), byKeyMap(h.Select(mode, "effect"))
	for i, k := range sorted {
		ok, err := checkRecord(ri, fmt.Sprintf("%s-%s-%d", ri.name, mode, i), dos[k], effs[k])
		if !ok {
			m.violate("key %s: the requests and the effect are not linearizable as one record (visualization in %s)", k, ri.dir)
			lin = false
			break
		} else if err != nil {
			m.Errors["check:"+err.Error()]++
		}
	}
	m.Linearizable = &lin
	return m
}

// takenOver reports whether op succeeded for a claim after a claim with a
// greater fence had been granted (its executor started before op was
// sent), and that fence.
func takenOver(op Op, claims []Op) (uint64, bool) {
	if op.Status != OK {
		return 0, false
	}
	for _, c := range claims {
		if c.Fence > op.Fence && c.Invoke < op.Invoke {
			return c.Fence, true
		}
	}
	return 0, false
}

// overlappingClaims returns two claims of which the second began while
// the first was valid (its output: the validity's end) and its executor
// had not finished. A claim's operation is recorded once it was granted,
// so its Invoke is an upper bound of the grant: a greater fence says
// which grant came second, and the second's Invoke before the first's
// end says it was granted before then. (Invoke order alone is not grant
// order: a worker paused between its grant and the record records late.)
func overlappingClaims(claims []Op) (Op, Op, bool) {
	for _, a := range claims {
		until, err := strconv.ParseInt(a.Out, 10, 64)
		if a.Status != OK || err != nil {
			continue
		}
		for _, b := range claims {
			if b.Proc != a.Proc && b.Fence > a.Fence && b.Invoke < until && b.Invoke < a.Complete {
				return a, b, true
			}
		}
	}
	return Op{}, Op{}, false
}

// byKeyMap groups ops by key.
func byKeyMap(ops []Op) map[string][]Op {
	out := map[string][]Op{}
	for _, op := range ops {
		out[op.Key] = append(out[op.Key], op)
	}
	return out
}

// recInput is a request answered with Answer, or an effect that wrote
// Value (Unknown: an effect whose outcome is unknown).
type recInput struct {
	Effect  bool
	Value   string
	Unknown bool
}

// recordModel is an idempotency record together with the effect it guards:
// the effect happens at most once, and a request is answered only with the
// effect that has happened (so never before it, and always the same).
var recordModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(string), input.(recInput)
		if !in.Effect {
			return st != "" && in.Value == st, st
		}
		if st != "" {
			return in.Unknown, st // a second effect: only if it never applied
		}
		return true, in.Value
	},
	DescribeOperation: func(input, output any) string {
		in := input.(recInput)
		if !in.Effect {
			return fmt.Sprintf("request → %q", in.Value)
		}
		if in.Unknown {
			return fmt.Sprintf("effect %q ?", in.Value)
		}
		return fmt.Sprintf("effect %q", in.Value)
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "no effect"
		}
		return fmt.Sprintf("effect %q", state)
	},
}

// checkRecord checks one key's answered requests and its effects against
// recordModel. Requests and effects that failed or whose outcome is
// unknown returned nothing and are left out, except effects whose outcome
// is unknown, which may have applied at any later time.
func checkRecord(ri *runInfo, name string, dos, effects []Op) (bool, error) {
	client := clientIDs()
	var ops []porcupine.Operation
	for _, d := range dos {
		if d.Status == OK {
			ops = append(ops, porcupine.Operation{ClientId: client(d.Proc), Input: recInput{Value: effectOf(d.Out)}, Call: d.Invoke, Return: d.Complete})
		}
	}
	for _, e := range effects {
		in := recInput{Effect: true, Value: e.In}
		ret := e.Complete
		switch e.Status {
		case Fail:
			continue
		case Unknown:
			in.Unknown, ret = true, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: client(e.Proc), Input: in, Call: e.Invoke, Return: ret})
	}
	if len(ops) == 0 {
		return true, nil
	}
	return porcupineCheck(ri, name, recordModel, ops)
}
