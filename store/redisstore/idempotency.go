package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
)

var (
	//go:embed lua/idempotency_begin.lua
	idemBeginSrc string
	//go:embed lua/idempotency_renew.lua
	idemRenewSrc string
	//go:embed lua/idempotency_complete.lua
	idemCompleteSrc string
	//go:embed lua/idempotency_release.lua
	idemReleaseSrc string
	//go:embed lua/idempotency_inspect.lua
	idemInspectSrc string

	idemBeginScript    = rclient.NewScript(idemBeginSrc)
	idemRenewScript    = rclient.NewScript(idemRenewSrc)
	idemCompleteScript = rclient.NewScript(idemCompleteSrc)
	idemReleaseScript  = rclient.NewScript(idemReleaseSrc)
	idemInspectScript  = rclient.NewScriptReadOnly(idemInspectSrc)
)

// Idempotency returns the store's idempotency.Store view. A record is one
// hash, <prefix>idem{<n>:<scope><key>} (n the length of the escaped scope,
// so scope and key cannot run into each other; the whole identity is the
// hash tag, so records spread over a cluster's slots). Every call is one
// script (EVALSHA, EVAL after NOSCRIPT): one round trip, judged on the
// server's clock (TIME inside the script). The hash expires (PEXPIREAT)
// when its retention ends, a claimed one not before its claim; Redis then
// forgets it, and the next claim's fence falls back to the clock floor
// (TIME in microseconds), still above every fence granted before as long
// as the server clock does not go back. Released records keep their fence
// until they expire.
func (s *Store) Idempotency() idempotency.Store { return idemView{s} }

type idemView struct{ s *Store }

// idemKey returns the key of a record.
func (s *Store) idemKey(id idempotency.ID) string {
	sc := escape(id.Scope)
	return s.prefix + "idem{" + strconv.Itoa(len(sc)) + ":" + sc + escape(id.Key) + "}"
}

// idemErr classifies an error for the idempotency package: transport
// failures wrap idempotency.ErrUnavailable (and lease.ErrUnavailable),
// arguments the server refused wrap idempotency.ErrInvalid.
func (s *Store) idemErr(err error) error {
	err = s.fail(err)
	switch {
	case errors.Is(err, lease.ErrUnavailable):
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	case errors.Is(err, lease.ErrInvalid):
		return fmt.Errorf("%w: %w", idempotency.ErrInvalid, err)
	}
	return err
}

func (v idemView) ready(ctx context.Context) error {
	if err := v.s.ready(ctx); err != nil {
		if errors.Is(err, lease.ErrUnavailable) {
			return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

func msArg(d time.Duration) string { return strconv.FormatInt(ceilMillis(d), 10) }

func (v idemView) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	if err := driver.ValidateBegin(b); err != nil {
		return driver.Begun{}, err
	}
	if err := v.ready(ctx); err != nil {
		return driver.Begun{}, err
	}
	take := "0"
	if b.Takeover {
		take = "1"
	}
	key := v.s.idemKey(b.ID)
	res, p := v.s.write(ctx, idemBeginScript, []string{key},
		[]string{b.Fingerprint, b.Token.Reveal(), msArg(b.ClaimTTL), msArg(b.Retention), take}, false)
	arr, err := res.ToArray()
	if err != nil {
		return driver.Begun{}, v.s.idemErr(err)
	}
	bad := malformed("idempotency begin")
	if len(arr) < 1 {
		return driver.Begun{}, bad
	}
	kind, err := arr[0].AsInt64()
	if err != nil {
		return driver.Begun{}, bad
	}
	ints := func(i int) int64 {
		if len(arr) <= i {
			err = bad
			return 0
		}
		n, e := arr[i].AsInt64()
		if e != nil {
			err = bad
		}
		return n
	}
	var got driver.Begun
	switch kind {
	case 1:
		got = driver.Begun{State: driver.Claimed, Fence: uint64(ints(1)), TTL: time.Duration(ints(2)) * time.Millisecond}
	case 2:
		got.State = driver.Completed
		got.Outcome.Failed = ints(1) == 1
		if len(arr) != 4 {
			return driver.Begun{}, bad
		}
		value, e1 := arr[2].AsBytes()
		msg, e2 := arr[3].ToString()
		if e1 != nil || e2 != nil {
			return driver.Begun{}, bad
		}
		got.Outcome.Value, got.Outcome.Message = value, msg
	case 3:
		got = driver.Begun{State: driver.InProgress, TTL: time.Duration(ints(1)) * time.Microsecond}
	case 4:
		got = driver.Begun{State: driver.Abandoned, Fence: uint64(ints(1))}
	case 5:
		got.State = driver.Mismatch
	default:
		return driver.Begun{}, bad
	}
	if err != nil {
		return driver.Begun{}, err
	}
	switch got.State {
	case driver.Claimed:
		if err := v.s.confirm(ctx, p); err != nil {
			// Give the claim up on the primary: the caller will not run.
			cctx, cancel := v.s.afterUnconfirmed(ctx)
			_ = idemReleaseScript.Exec(cctx, v.s.c, []string{key}, []string{b.Token.Reveal()}).Error()
			cancel()
			return driver.Begun{}, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
		}
	case driver.Completed:
		// A replay reports a result this call did not write: make sure
		// the replicas have it before answering from it.
		if err := v.s.confirmState(ctx, key); err != nil {
			return driver.Begun{}, v.s.idemErr(err)
		}
	}
	return got, nil
}

// exec runs a write script that answers 1 (done) or 0 (claim lost).
func (v idemView) exec(ctx context.Context, op string, script *rclient.Script, id idempotency.ID, args []string) error {
	if err := v.ready(ctx); err != nil {
		return err
	}
	res, p := v.s.write(ctx, script, []string{v.s.idemKey(id)}, args, false)
	n, err := res.AsInt64()
	if err != nil {
		return v.s.idemErr(err)
	}
	if n != 1 {
		return fmt.Errorf("%w: redisstore: idempotency %s", idempotency.ErrClaimLost, op)
	}
	if err := v.s.confirm(ctx, p); err != nil {
		return v.s.idemErr(err)
	}
	return nil
}

func (v idemView) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateClaimTTL(ttl); err != nil {
		return err
	}
	return v.exec(ctx, "renew", idemRenewScript, id, []string{token, strconv.FormatUint(fence, 10), msArg(ttl)})
}

func (v idemView) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	failed := "0"
	if out.Failed {
		failed = "1"
	}
	return v.exec(ctx, "complete", idemCompleteScript, id, []string{token, strconv.FormatUint(fence, 10), msArg(retention),
		failed, driver.CleanMessage(out.Message), rueidis.BinaryString(out.Value)})
}

func (v idemView) Release(ctx context.Context, id idempotency.ID, token string) error {
	if err := driver.ValidateID(id); err != nil {
		return err
	}
	if err := driver.ValidateToken(token); err != nil {
		return err
	}
	return v.exec(ctx, "release", idemReleaseScript, id, []string{token})
}

func (v idemView) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	if err := driver.ValidateID(id); err != nil {
		return idempotency.Record{}, err
	}
	arr, err := idemInspectScript.Exec(ctx, v.s.c, []string{v.s.idemKey(id)}, nil).ToArray()
	if err != nil {
		return idempotency.Record{}, v.s.idemErr(err)
	}
	rec := idempotency.Record{ID: id}
	if len(arr) == 0 {
		return rec, nil
	}
	bad := malformed("idempotency inspect")
	if len(arr) != 8 {
		return idempotency.Record{}, bad
	}
	var n [5]int64
	for i, j := range []int{0, 2, 3, 4, 5} {
		if n[i], err = arr[j].AsInt64(); err != nil {
			return idempotency.Record{}, bad
		}
	}
	fp, e1 := arr[1].ToString()
	msg, e2 := arr[6].ToString()
	value, e3 := arr[7].AsBytes()
	if e1 != nil || e2 != nil || e3 != nil {
		return idempotency.Record{}, bad
	}
	rec.Exists = true
	rec.Completed = n[0] == 1
	rec.Fingerprint = fp
	rec.Fence = uint64(n[1])
	rec.ClaimTTL = time.Duration(n[2]) * time.Microsecond
	rec.Expires = time.Duration(n[3]) * time.Microsecond
	if rec.Completed {
		rec.Outcome = idempotency.Outcome{Value: value, Failed: n[4] == 1, Message: msg}
	}
	return rec, nil
}
