package idempotency

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"log/slog"
	"math"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/tenancy"
)

// Request identifies one logical request.
type Request struct {
	// Scope is the principal and the operation, e.g. "user:42 POST
	// /payments": equal keys in different scopes never meet. 1 to
	// MaxScopeLen bytes of UTF-8 without NUL.
	Scope string
	// Key is the client's idempotency key: 1 to MaxKeyLen bytes of
	// printable ASCII.
	Key string
	// Fingerprint is a digest of the request's input (see [Fingerprint]).
	// A later request with the same scope and key but another fingerprint
	// is refused with ErrMismatch. Empty means the input is not checked.
	Fingerprint string
}

// ID returns the request's record ID.
func (r Request) ID() ID { return ID{Scope: r.Scope, Key: r.Key} }

// Result is what Do returns: fn's value, first time or replayed.
type Result struct {
	// Value is fn's value: returned by fn in this call, or recorded by an
	// earlier call.
	Value []byte
	// Replayed reports that Value was recorded by an earlier call and fn
	// did not run now.
	Replayed bool
}

// Func is the work Do runs at most once per record. ctx is cancelled when
// the claim is lost or its validity runs out; c carries the claim's fence
// for a resource-side guard.
type Func func(ctx context.Context, c *Claim) ([]byte, error)

// FinalError marks an error as the final outcome of a request: Do records
// it (with the value fn returned alongside) and replays it to every later
// request with the same key, instead of releasing the claim. Mark errors
// with [Final]; with Options.Errors set to StoreErrors every error counts
// as final.
type FinalError struct {
	// Err is the error: fn's own on the first execution, one carrying the
	// recorded message on a replay.
	Err error
}

// Error describes the error.
func (e *FinalError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FinalError) Unwrap() error { return e.Err }

// Final marks err as final (nil stays nil).
func Final(err error) error {
	if err == nil {
		return nil
	}
	var fe *FinalError
	if errors.As(err, &fe) {
		return err
	}
	return &FinalError{Err: err}
}

// ErrorPolicy says what Do does with an error fn returns.
type ErrorPolicy int

const (
	// ReleaseErrors (the default): an error releases the claim, nothing is
	// recorded, and a retry runs fn again; errors marked with Final are
	// recorded and replayed.
	ReleaseErrors ErrorPolicy = iota
	// StoreErrors: every error is recorded and replayed, as if marked
	// Final (Stripe's policy).
	StoreErrors
)

// AbandonedPolicy says what Do does when it finds a claim that expired
// without a recorded result.
type AbandonedPolicy int

const (
	// ReportUnknown (the default): Do returns an *UnknownError and does not
	// run fn. The earlier executor may have applied its effect before it
	// died; reconcile, then call Recover to run fn again (or record the
	// reconciled result from it).
	ReportUnknown AbandonedPolicy = iota
	// Rerun: Do takes the claim over with a greater fence and runs fn
	// again. Use it when fn's effects are themselves idempotent or guarded
	// by the claim's fence. The stalled executor's late completion is
	// refused.
	Rerun
)

// Options configure a Keeper. Nil, and a zero field, mean the defaults
// documented on each field; New refuses out-of-range values (negative
// durations among them) with ErrInvalid.
type Options struct {
	// ClaimTTL is the claim's lease time on the store's clock. Do keeps the
	// claim alive (renewing every ClaimTTL/3) while fn runs, so it bounds
	// how long a crashed executor blocks its key, not how long fn may run.
	// Default 30s; MinTTL to MaxClaimTTL.
	ClaimTTL time.Duration
	// Retention is how long a result is kept and replayed, from its
	// completion, judged on the store's clock when it is read. A key used
	// again after it runs as new. Default 24h; MinTTL to MaxRetention.
	Retention time.Duration
	// Errors is the error policy. Default ReleaseErrors.
	Errors ErrorPolicy
	// Abandoned is the policy for expired claims without a result.
	// Default ReportUnknown.
	Abandoned AbandonedPolicy
	// Wait makes a duplicate wait while an earlier request with the same
	// key is in progress (until ctx ends) and then return its result,
	// instead of ErrInProgress.
	Wait bool
	// RetryMin and RetryMax bound the jittered backoff of waiting and of
	// store retries. Defaults 5ms and 500ms (at least RetryMin);
	// RetryMax may not be below RetryMin.
	RetryMin, RetryMax time.Duration
	// DriftFactor and Margin are subtracted from the claim time to get the
	// client's validity (measured on the monotonic clock from when the
	// request was sent), so fn's context ends before the store can expire
	// the claim: the validity is ClaimTTL*(1-DriftFactor) - Margin, where
	// at most a quarter of the ClaimTTL of Margin is subtracted.
	// Defaults 0.01 and 2ms (a quarter of a shorter ClaimTTL); DriftFactor in [0, 0.5) (0 means the
	// default), Margin below half the ClaimTTL.
	DriftFactor float64
	Margin      time.Duration
	// ReleaseTimeout bounds store calls made after the caller's context
	// ended (releasing or completing a claim). Default 5s.
	ReleaseTimeout time.Duration
	// Logger receives debug and warning records (a lost or abandoned claim
	// is a warning). Tokens are never logged. Default: discard.
	Logger *slog.Logger
	// MeterProvider supplies the instruments tenure.idempotency.requests
	// (attributes store, outcome: executed, replayed, mismatch,
	// in_progress, unknown, claim_lost, failed, error) and
	// tenure.store.duration (see docs/observability.md). Default: the
	// global provider (otel.GetMeterProvider), so a service that installed
	// an OpenTelemetry SDK gets them without code. Instrumentation never
	// changes a result.
	MeterProvider metric.MeterProvider
	// TracerProvider supplies the span tenure.idempotency.do (Do, Recover,
	// DoTx) and a span per store call under it. Default: the global
	// provider (otel.GetTracerProvider). When both providers are the
	// OpenTelemetry no-op providers, instrumentation is off entirely.
	TracerProvider trace.TracerProvider
	// TraceKeys adds the request's scope and key to spans (never to
	// metrics). Default false: scopes, which name principals, and keys stay
	// out of telemetry.
	TraceKeys bool
}

// Defaults returns o (nil: the zero Options) with every default filled in,
// and an error wrapping ErrInvalid if a value is out of range: a negative
// duration, a DriftFactor that is negative, NaN, infinite or 0.5 or more, a
// RetryMax below RetryMin, a Margin of half the ClaimTTL or more, or an
// unknown policy. Zero always means the default.
func Defaults(o *Options) (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ClaimTTL", r.ClaimTTL}, {"Retention", r.Retention}, {"RetryMin", r.RetryMin},
		{"RetryMax", r.RetryMax}, {"Margin", r.Margin}, {"ReleaseTimeout", r.ReleaseTimeout},
	} {
		if d.v < 0 {
			return r, fmt.Errorf("%w: idempotency: Options.%s %v is negative", ErrInvalid, d.name, d.v)
		}
	}
	if math.IsNaN(r.DriftFactor) || math.IsInf(r.DriftFactor, 0) || r.DriftFactor < 0 || r.DriftFactor >= 0.5 {
		return r, fmt.Errorf("%w: idempotency: Options.DriftFactor %v must be in [0, 0.5)", ErrInvalid, r.DriftFactor)
	}
	if r.RetryMin > 0 && r.RetryMax > 0 && r.RetryMax < r.RetryMin {
		return r, fmt.Errorf("%w: idempotency: Options.RetryMax %v is below RetryMin %v", ErrInvalid, r.RetryMax, r.RetryMin)
	}
	if r.ClaimTTL == 0 {
		r.ClaimTTL = 30 * time.Second
	}
	if r.Retention == 0 {
		r.Retention = 24 * time.Hour
	}
	if r.RetryMin == 0 {
		r.RetryMin = 5 * time.Millisecond
	}
	if r.RetryMax == 0 {
		r.RetryMax = max(500*time.Millisecond, r.RetryMin)
	}
	if r.DriftFactor == 0 {
		r.DriftFactor = 0.01
	}
	if r.Margin == 0 {
		r.Margin = min(2*time.Millisecond, r.ClaimTTL/4)
	}
	if r.ReleaseTimeout == 0 {
		r.ReleaseTimeout = 5 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if err := driver.ValidateClaimTTL(r.ClaimTTL); err != nil {
		return r, fmt.Errorf("idempotency: Options.ClaimTTL: %w", err)
	}
	if err := driver.ValidateRetention(r.Retention); err != nil {
		return r, fmt.Errorf("idempotency: Options.Retention: %w", err)
	}
	if r.Margin >= r.ClaimTTL/2 {
		return r, fmt.Errorf("%w: idempotency: Options.Margin %v must be below half the ClaimTTL %v", ErrInvalid, r.Margin, r.ClaimTTL)
	}
	if r.Errors != ReleaseErrors && r.Errors != StoreErrors {
		return r, fmt.Errorf("%w: idempotency: unknown Options.Errors %d", ErrInvalid, r.Errors)
	}
	if r.Abandoned != ReportUnknown && r.Abandoned != Rerun {
		return r, fmt.Errorf("%w: idempotency: unknown Options.Abandoned %d", ErrInvalid, r.Abandoned)
	}
	return r, nil
}

// Keeper runs requests at most once per record on a Store. It is safe for
// concurrent use.
type Keeper struct {
	s   Store // as given
	st  Store // s, timed when instrumentation is on
	o   Options
	tel *telemetry // nil when off
}

// New returns a Keeper on s. o may be nil for the defaults. A nil s (or an
// interface holding a nil pointer) or options out of range give an error
// wrapping ErrInvalid.
func New(s Store, o *Options) (*Keeper, error) {
	if isNil(s) {
		return nil, fmt.Errorf("%w: idempotency: nil Store", ErrInvalid)
	}
	opts, err := Defaults(o)
	if err != nil {
		return nil, err
	}
	tel := newTelemetry(s, &opts)
	return &Keeper{s: s, st: newTimedStore(s, tel), o: opts, tel: tel}, nil
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, func or channel.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// Options returns the Keeper's options with defaults filled in.
func (k *Keeper) Options() Options { return k.o }

// Store returns the Keeper's store.
func (k *Keeper) Store() Store { return k.s }

// NewToken returns a fresh random claim token of 128 bits.
func NewToken() Token { return secret.New(crand.Text()) }

// Fingerprint returns the hex SHA-256 digest of parts, each
// length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
func Fingerprint(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// validateRequest checks a request's scope, key and fingerprint.
func validateRequest(req Request) error {
	if err := driver.ValidateID(req.ID()); err != nil {
		return err
	}
	return driver.ValidateFingerprint(req.Fingerprint)
}

// Do runs fn at most once for req and returns its value; later calls with
// the same scope and key replay the recorded value (Result.Replayed):
//
//   - same key, other fingerprint: ErrMismatch, fn not run;
//   - an earlier call still holds the claim: an *InProgressError (or, with
//     Options.Wait, Do waits and returns its result);
//   - an earlier call's claim expired without a result: an *UnknownError
//     (or, with Options.Abandoned = Rerun, fn runs again under a new fence);
//   - the store cannot be reached: an error wrapping ErrUnavailable, fn not
//     run.
//
// While fn runs, Do keeps the claim alive; fn's context is cancelled when
// the claim is lost or its validity runs out. If fn returns an error, the
// claim is released (a retry runs fn again) unless the error is final (see
// [Final], Options.Errors): then it is recorded, returned as a
// *FinalError with fn's value in Result, and replayed. If fn panics (or
// calls runtime.Goexit), the keep-alive stops, the claim is released, and
// the panic goes on.
//
// Apart from a recorded *FinalError, Result is empty whenever the error is
// not nil. If fn's result cannot be recorded, the error is an
// *UnknownError (with the store's error). If the claim was lost while fn
// ran (a later attempt took the expired claim over, or fn returned an
// error after the claim's validity ran out), the error wraps ErrClaimLost
// and fn's own error, if any. A result returned after the validity ran out
// is still recorded, and returned, when nobody took the claim over.
func (k *Keeper) Do(ctx context.Context, req Request, fn Func) (Result, error) {
	return k.observe(ctx, req, fn, func(ctx context.Context, fn Func) (Result, error) { return k.do(ctx, req, fn, false) })
}

// observe runs one request through run with its span and its count in
// tenure.idempotency.requests.
func (k *Keeper) observe(ctx context.Context, req Request, fn Func, run func(context.Context, Func) (Result, error)) (Result, error) {
	if k == nil || k.tel == nil {
		return run(ctx, fn)
	}
	if ctx == nil {
		return run(ctx, fn) // refused by check
	}
	ctx, sp := k.tel.start(ctx, "tenure.idempotency.do", req)
	ran := false
	counted := fn
	if fn != nil {
		counted = func(ctx context.Context, c *Claim) ([]byte, error) {
			ran = true
			return fn(ctx, c)
		}
	}
	res, err := run(ctx, counted)
	k.tel.done(ctx, sp, res, ran, err)
	return res, err
}

// Recover is Do that takes over an abandoned claim (one that expired
// without a result) and runs fn again under a greater fence, whatever
// Options.Abandoned says. Call it after reconciling an *UnknownError: fn
// can redo the work, or return the result found by reconciliation so that
// it is recorded and replayed from then on.
func (k *Keeper) Recover(ctx context.Context, req Request, fn Func) (Result, error) {
	return k.observe(ctx, req, fn, func(ctx context.Context, fn Func) (Result, error) { return k.do(ctx, req, fn, true) })
}

func (k *Keeper) check(ctx context.Context, req Request, fn Func) error {
	if k == nil || k.s == nil {
		return fmt.Errorf("%w: idempotency: nil Keeper (use New)", ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: idempotency: nil context", ErrInvalid)
	}
	if err := validateRequest(req); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: idempotency: nil fn", ErrInvalid)
	}
	return nil
}

func (k *Keeper) begin(req Request, token Token, takeover bool) driver.Begin {
	return driver.Begin{ID: req.ID(), Fingerprint: req.Fingerprint, Token: token,
		ClaimTTL: k.o.ClaimTTL, Retention: k.o.Retention, Takeover: takeover}
}

func (k *Keeper) do(ctx context.Context, req Request, fn Func, takeover bool) (Result, error) {
	if err := k.check(ctx, req, fn); err != nil {
		return Result{}, err
	}
	takeover = takeover || k.o.Abandoned == Rerun
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	token := NewToken()
	var sent time.Time // when the answer's Begin was sent
	b, err := k.claimWaiting(ctx, req, func(ctx context.Context) (driver.Begun, error) {
		sent = time.Now()
		b, err := k.st.Begin(ctx, k.begin(req, token, takeover))
		if err != nil && !errors.Is(err, ErrInvalid) {
			// The claim may have been applied without its reply: drop it,
			// so it does not block the key for a whole claim TTL.
			k.cleanup(ctx, req.ID(), token)
		}
		return b, err
	})
	if err != nil {
		return Result{}, err
	}
	if b.State == driver.Claimed {
		return k.run(ctx, req, token, b, sent, fn)
	}
	k.abandoned(ctx, req, b)
	return k.answer(req, b)
}

// claimWaiting calls begin (a Begin, or a Claim in the caller's
// transaction) and returns its answer. While the answer is another
// request's live claim and Options.Wait is set, it calls begin again after
// a jittered backoff, never longer than the holder's remaining claim time,
// until the answer changes or ctx ends.
func (k *Keeper) claimWaiting(ctx context.Context, req Request, begin func(context.Context) (driver.Begun, error)) (driver.Begun, error) {
	var waited *InProgressError // the last answer while waiting
	gaveUp := func() error {
		return fmt.Errorf("idempotency: gave up waiting for key %q: %w (last: %w)", req.Key, ctx.Err(), waited)
	}
	for attempt := 1; ; attempt++ {
		b, err := begin(ctx)
		if err != nil {
			if waited != nil && ctx.Err() != nil {
				return driver.Begun{}, gaveUp()
			}
			return driver.Begun{}, err
		}
		if b.State != driver.InProgress || !k.o.Wait {
			return b, nil
		}
		waited = &InProgressError{Scope: req.Scope, Key: req.Key, RetryAfter: b.TTL}
		wait := k.backoff(attempt)
		if b.TTL > 0 && b.TTL < wait {
			wait = b.TTL
		}
		if !sleep(ctx, wait) {
			return driver.Begun{}, gaveUp()
		}
	}
}

// abandoned logs an abandoned claim that Do reports as unknown.
func (k *Keeper) abandoned(ctx context.Context, req Request, b driver.Begun) {
	if b.State == driver.Abandoned {
		k.o.Logger.WarnContext(ctx, "idempotency: an earlier attempt's claim expired without a recorded result; its outcome is unknown until reconciled",
			"scope", req.Scope, "key", req.Key, "fence", b.Fence)
	}
}

// answer turns a Begun that is not Claimed into Do's return values.
func (k *Keeper) answer(req Request, b driver.Begun) (Result, error) {
	switch b.State {
	case driver.Completed:
		res := Result{Value: b.Outcome.Value, Replayed: true}
		if b.Outcome.Failed {
			return res, &FinalError{Err: errors.New(b.Outcome.Message)}
		}
		return res, nil
	case driver.Mismatch:
		return Result{}, fmt.Errorf("%w: key %q in scope %q", ErrMismatch, req.Key, req.Scope)
	case driver.InProgress:
		return Result{}, &InProgressError{Scope: req.Scope, Key: req.Key, RetryAfter: b.TTL}
	case driver.Abandoned:
		return Result{}, &UnknownError{Scope: req.Scope, Key: req.Key, Fence: b.Fence}
	}
	return Result{}, fmt.Errorf("idempotency: the store answered driver.Begin with state %v", b.State)
}

// final reports whether fn's error is recorded.
func (k *Keeper) final(err error) bool {
	var fe *FinalError
	return k.o.Errors == StoreErrors || errors.As(err, &fe)
}

// outcome is the record of fn's result.
func (k *Keeper) outcome(value []byte, err error) Outcome {
	out := Outcome{Value: value}
	if err != nil {
		out.Failed = true
		out.Message = driver.CleanMessage(err.Error())
	}
	return out
}

func (k *Keeper) run(ctx context.Context, req Request, token Token, b driver.Begun, sent time.Time, fn Func) (Result, error) {
	id := req.ID()
	c := k.newClaim(id, token, b.Fence, b.TTL, sent)
	// fn's context ends with the claim's error the moment it is lost or
	// its validity runs out.
	ka := tenancy.NewGroup(ctx, k.o.Logger, "idempotency: claim")
	ka.Add(c.g)
	fnCtx := ka.Context()
	var lost error // the claim's error when fn returned: it was lost or ran out
	finish := func() {
		ka.Stop()
		lost = c.Err()
		c.end(errFinished)
	}

	// However fn ends without returning (a panic, which the caller may
	// recover, or runtime.Goexit), the keep-alive stops and the claim is
	// released before the panic goes on.
	returned := false
	defer func() {
		if !returned {
			finish()
			k.release(ctx, id, token)
		}
	}()
	value, fnErr := fn(fnCtx, c)
	returned = true
	finish()

	if fnErr != nil && !k.final(fnErr) {
		rerr := k.release(ctx, id, token)
		if lost != nil || errors.Is(rerr, ErrClaimLost) {
			return Result{}, k.lostError(ctx, req, b.Fence, errors.Join(lost, rerr), fnErr)
		}
		return Result{}, fnErr
	}
	if fnErr != nil {
		fnErr = Final(fnErr)
	}
	err := k.complete(ctx, id, token, b.Fence, k.outcome(value, fnErr))
	switch {
	case err == nil:
		// Recorded (also after the claim's validity ran out, when nobody
		// took it over): the value stands.
		return Result{Value: value}, fnErr
	case errors.Is(err, ErrClaimLost):
		return Result{}, k.lostError(ctx, req, b.Fence, err, fnErr)
	}
	return Result{}, &UnknownError{Scope: req.Scope, Key: req.Key, Fence: b.Fence, Ran: true, Err: err}
}

// lostError reports that this attempt's claim was lost (cause wraps
// ErrClaimLost, or is nil when only the release found it gone): the error
// wraps ErrClaimLost and fn's error, if any.
func (k *Keeper) lostError(ctx context.Context, req Request, fence uint64, cause, fnErr error) error {
	k.o.Logger.WarnContext(ctx, "idempotency: the claim was lost while fn ran; its result does not stand",
		"scope", req.Scope, "key", req.Key, "fence", fence)
	if !errors.Is(cause, ErrClaimLost) {
		cause = errors.Join(ErrClaimLost, cause)
	}
	return fmt.Errorf("idempotency: key %q in scope %q: this attempt's claim (fence %d) was lost and its result does not stand: %w",
		req.Key, req.Scope, fence, errors.Join(cause, fnErr))
}

// complete records out, sending the request again (same token and fence:
// the store accepts a repeat) while its outcome is unknown, for at most a
// claim TTL and while ctx allows (after ctx ended, ReleaseTimeout). Each
// attempt may take a third of the claim TTL, and at least completeFloor:
// a slow store is waited for (the store refuses a completion that comes
// after another attempt took over, so waiting longer is safe), a short
// claim TTL does not make every completion on a busy store unknown.
func (k *Keeper) complete(ctx context.Context, id ID, token Token, fence uint64, out Outcome) error {
	ctx, cancel := k.afterCtx(ctx)
	defer cancel()
	deadline := time.Now().Add(k.o.ClaimTTL)
	per := max(k.o.ClaimTTL/3, completeFloor)
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, per)
		err := k.st.Complete(actx, id, token.Reveal(), fence, out, k.o.Retention)
		acancel()
		if err == nil || !errors.Is(err, ErrUnavailable) {
			return err
		}
		k.o.Logger.DebugContext(ctx, "idempotency: completion outcome unknown, sending it again",
			"scope", id.Scope, "key", id.Key, "attempt", attempt, "err", err)
		if time.Now().After(deadline) || !sleep(ctx, k.backoff(attempt)) {
			return err
		}
	}
}

// completeFloor is the shortest time one completion attempt may take.
const completeFloor = time.Second

// afterCtx returns ctx, or a context bounded by ReleaseTimeout when ctx has
// already ended.
func (k *Keeper) afterCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), k.o.ReleaseTimeout)
}

// release drops the claim after an error or a panic, retrying while its
// outcome is unknown within ReleaseTimeout, and returns the store's last
// answer (ErrClaimLost: token no longer held the claim). A claim left
// behind expires by itself (and then reads as abandoned).
func (k *Keeper) release(ctx context.Context, id ID, token Token) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.o.ReleaseTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := k.st.Release(rctx, id, token.Reveal())
		if err == nil || errors.Is(err, ErrClaimLost) || errors.Is(err, ErrInvalid) {
			return err
		}
		if !sleep(rctx, k.backoff(attempt)) {
			k.o.Logger.WarnContext(ctx, "idempotency: releasing a claim failed; it expires by itself",
				"scope", id.Scope, "key", id.Key, "err", err)
			return err
		}
	}
}

// cleanup releases token in the background after a Begin whose outcome is
// unknown.
func (k *Keeper) cleanup(ctx context.Context, id ID, token Token) {
	go func() { _ = k.release(ctx, id, token) }()
}

// margin is the rule by which the claim's validity ends before the store
// lets another attempt take it over: DriftFactor of the claim TTL plus
// Margin (at most a quarter of the claim TTL).
func (k *Keeper) margin() tenancy.Margin {
	return tenancy.Margin{DriftFactor: k.o.DriftFactor, Fixed: k.o.Margin}
}

// backoff returns a jittered exponential delay for attempt (1-based).
func (k *Keeper) backoff(attempt int) time.Duration {
	return tenancy.Backoff(k.o.RetryMin, k.o.RetryMax, attempt)
}

// sleep waits d or until ctx ends; it reports whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool { return tenancy.Sleep(ctx, d) }
