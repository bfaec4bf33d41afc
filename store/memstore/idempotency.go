package memstore

import (
	"context"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"sync"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// Idempotency returns the store's idempotency.Store view. Records live in a
// map judged on Options.Clock; a record whose retention ended is treated as
// absent when read and removed by a sweep that runs every 1024 claims.
// Released records keep their fence (until their retention ends), so the
// next claim's fence follows it even when the clock stands still.
func (s *Store) Idempotency() idempotency.Store {
	st := s.view("idempotency", func() any { return &idemState{recs: map[idempotency.ID]*idemRec{}} }).(*idemState)
	return idemView{s: s, st: st}
}

type idemState struct {
	mu     sync.Mutex
	recs   map[idempotency.ID]*idemRec
	begins int
}

type idemRec struct {
	fp         string
	token      string
	fence      uint64
	done       bool
	released   bool
	claimUntil time.Time
	expires    time.Time
	out        idempotency.Outcome
}

type idemView struct {
	s  *Store
	st *idemState
}

// live returns the record of id unless it is absent, released or past its
// retention.
func (v idemView) live(id idempotency.ID, now time.Time) *idemRec {
	r := v.st.recs[id]
	if r == nil || r.released || !r.expires.After(now) {
		return nil
	}
	return r
}

func (v idemView) sweep(now time.Time) {
	v.st.begins++
	if v.st.begins%1024 != 0 {
		return
	}
	for id, r := range v.st.recs {
		if !r.expires.After(now) {
			delete(v.st.recs, id)
		}
	}
}

func cloneOutcome(o idempotency.Outcome) idempotency.Outcome {
	o.Value = append([]byte(nil), o.Value...)
	return o
}

func (v idemView) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	if err := driver.ValidateBegin(b); err != nil {
		return driver.Begun{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Begun{}, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	now := v.s.now()
	v.sweep(now)
	claim := func(last uint64) driver.Begun {
		r := &idemRec{fp: b.Fingerprint, token: b.Token.Reveal(), fence: driver.NextFence(last, now),
			claimUntil: now.Add(b.ClaimTTL), expires: now.Add(max(b.ClaimTTL, b.Retention))}
		v.st.recs[b.ID] = r
		return driver.Begun{State: driver.Claimed, Fence: r.fence, TTL: b.ClaimTTL}
	}
	r := v.live(b.ID, now)
	switch {
	case r == nil:
		var last uint64
		if old := v.st.recs[b.ID]; old != nil {
			last = old.fence
		}
		return claim(last), nil
	case r.fp != b.Fingerprint:
		return driver.Begun{State: driver.Mismatch}, nil
	case r.done:
		return driver.Begun{State: driver.Completed, Outcome: cloneOutcome(r.out)}, nil
	case r.token == b.Token.Reveal():
		r.claimUntil = now.Add(b.ClaimTTL)
		r.expires = maxTime(r.expires, r.claimUntil)
		return driver.Begun{State: driver.Claimed, Fence: r.fence, TTL: b.ClaimTTL}, nil
	case r.claimUntil.After(now):
		return driver.Begun{State: driver.InProgress, TTL: r.claimUntil.Sub(now)}, nil
	case b.Takeover:
		return claim(r.fence), nil
	}
	return driver.Begun{State: driver.Abandoned, Fence: r.fence}, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (v idemView) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateClaimTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	now := v.s.now()
	r := v.st.recs[id]
	if r == nil || r.released || r.done || r.token != token || r.fence != fence || !r.claimUntil.After(now) {
		return idempotency.ErrClaimLost
	}
	r.claimUntil = now.Add(ttl)
	r.expires = maxTime(r.expires, r.claimUntil)
	return nil
}

func (v idemView) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateClaim(id, token, fence); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	r := v.st.recs[id]
	if r == nil || r.released || r.token != token || r.fence != fence {
		return idempotency.ErrClaimLost
	}
	if r.done {
		return nil
	}
	now := v.s.now()
	r.done = true
	r.claimUntil = time.Time{}
	r.expires = now.Add(retention)
	out.Message = driver.CleanMessage(out.Message)
	r.out = cloneOutcome(out)
	return nil
}

func (v idemView) Release(ctx context.Context, id idempotency.ID, token string) error {
	if err := driver.ValidateID(id); err != nil {
		return err
	}
	if err := driver.ValidateToken(token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	r := v.st.recs[id]
	if r == nil || r.released || r.done || r.token != token {
		return idempotency.ErrClaimLost
	}
	r.released = true
	r.token = ""
	return nil
}

func (v idemView) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	if err := driver.ValidateID(id); err != nil {
		return idempotency.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	now := v.s.now()
	rec := idempotency.Record{ID: id}
	r := v.live(id, now)
	if r == nil {
		return rec, nil
	}
	rec.Exists = true
	rec.Completed = r.done
	rec.Fingerprint = r.fp
	rec.Fence = r.fence
	if !r.done && r.claimUntil.After(now) {
		rec.ClaimTTL = r.claimUntil.Sub(now)
	}
	rec.Expires = r.expires.Sub(now)
	if r.done {
		rec.Outcome = cloneOutcome(r.out)
	}
	return rec, nil
}
