package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(
		Experiment{
			Name:  "fence-rejects-stale",
			Shows: "A holder paused past its lease writes late: the guard refuses its older fence, so the new holder's write stands.",
			Want:  "newFenceUpdate=1 staleFenceUpdate=0 protectedValue=new-owner",
			Run:   fenceRejectsStale,
		},
		Experiment{
			Name:  "max-fence-is-ttl-blind",
			Shows: "A max-fence guard still admits an expired holder while no newer holder has written; the strict holder check refuses it.",
			Want:  "ttlBlindAccepted=true strictHolderRejected=true",
			Run:   maxFenceIsTTLBlind,
		},
		Experiment{
			Name:  "unconditional-write-overwrites",
			Shows: "Without a guard, a paused holder's late write silently overwrites the new holder's (the failure tenure's guards prevent).",
			Want:  "staleOverwrite=true",
			Run:   unconditionalWriteOverwrites,
		},
		Experiment{
			Name:  "redis-release",
			Shows: "Releasing compares the token: an expired holder's release leaves the new holder's lock alone; the holder's own release frees it.",
			Want:  "stale-release=0 current-owner-preserved=true owner-release=1",
			Run:   redisRelease,
		},
		Experiment{
			Name:  "fixed-lease-expires",
			Shows: "A fixed lease with no keep-alive expires under long work, and the holder learns it is no longer the owner.",
			Want:  "still.owner=false",
			Run:   fixedLeaseExpires,
		},
		Experiment{
			Name:  "keepalive-holds",
			Shows: "Do renews the lease while its function runs, so work longer than the TTL keeps ownership.",
			Want:  "still.owner=true",
			Run:   keepaliveHolds,
		},
		Experiment{
			Name:  "delex-release",
			Shows: "The compare-and-delete release path (DELEX on Redis 8.4+) never deletes a lock another holder took over.",
			Want:  "expiredOwnerDelete=0 newOwnerRetained=true matchingOwnerDelete=1",
			Run:   delexRelease,
		},
		Experiment{
			Name:  "lua-release",
			Shows: "The scripted compare-and-delete release leaves another holder's lock alone and deletes the caller's own.",
			Want:  "luaWrongOwner=0 luaMatchingOwner=1",
			Run:   luaRelease,
		},
		Experiment{
			Name:  "fence-from-counter",
			Shows: "Fences minted by the store strictly increase, so a business row checked in a transaction refuses the older tenure.",
			Want:  "newFenceUpdate=1 staleFenceUpdate=0 protectedValue=new-owner",
			Run:   fenceFromCounter,
		},
	)
}

func b01(b bool) string { return map[bool]string{false: "0", true: "1"}[b] }

// expiredThenTaken gives key to A for aTTL, waits until the store itself
// frees it (A is paused: it neither renews nor releases), then gives it to B
// for bTTL.
func expiredThenTaken(ctx context.Context, env *Env, key string, aTTL, bTTL time.Duration) (a, b *lease.Lease, err error) {
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		return nil, nil, err
	}
	if a, err = lk.TryAcquire(ctx, key, aTTL); err != nil {
		return nil, nil, fmt.Errorf("acquire A: %w", err)
	}
	if err := waitFree(ctx, env.Leases, key); err != nil {
		return nil, nil, err
	}
	if b, err = lk.TryAcquire(ctx, key, bTTL); err != nil {
		return nil, nil, fmt.Errorf("acquire B: %w", err)
	}
	if b.Fence() <= a.Fence() {
		return nil, nil, fmt.Errorf("fence %d of B is not above A's %d", b.Fence(), a.Fence())
	}
	return a, b, nil
}

// waitFree polls the store's own judgement until key is free.
func waitFree(ctx context.Context, s lease.Store, key string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		info, err := s.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if !info.Held {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%q still held: %w", key, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// admitted runs a guarded write and reports whether it was admitted; a
// refusal must be the guard's (want), anything else is an error.
func admitted(err error, want error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, want):
		return false, nil
	}
	return false, err
}

// staleFenceStory is the classic story: B (newer fence) writes first, then
// the expired A writes with its older fence, through w.
func staleFenceStory(ctx context.Context, w Resource, name string, older, newer uint64) ([]KV, error) {
	newOK, err := admitted(w.FencedWrite(ctx, name, newer, "new-owner"), fence.ErrStale)
	if err != nil {
		return nil, err
	}
	staleOK, err := admitted(w.FencedWrite(ctx, name, older, "old-owner"), fence.ErrStale)
	if err != nil {
		return nil, err
	}
	v, err := w.Read(ctx, name)
	if err != nil {
		return nil, err
	}
	return []KV{{"newFenceUpdate", b01(newOK)}, {"staleFenceUpdate", b01(staleOK)}, {"protectedValue", v}}, nil
}

func fenceRejectsStale(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("fence-rejects-stale")
	a, b, err := expiredThenTaken(ctx, env, key, 150*time.Millisecond, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer b.Release(ctx)
	kvs, err := staleFenceStory(ctx, env.Resource, key+"/resource", a.Fence(), b.Fence())
	return kvs, nil, err
}

func maxFenceIsTTLBlind(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("max-fence-is-ttl-blind")
	a, b, err := expiredThenTaken(ctx, env, key, 150*time.Millisecond, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer b.Release(ctx)
	// B holds the lease but has not written yet: the max-fence guard has
	// never seen B's fence, so it still admits A's.
	blind, err := admitted(env.Resource.FencedWrite(ctx, key+"/max-fence", a.Fence(), "old-owner"), fence.ErrStale)
	if err != nil {
		return nil, nil, err
	}
	// The strict holder check asks the store who holds the lease now. The
	// resource is named after the lease key, so on Redis Cluster both live
	// in one hash slot and one script can check and write.
	aOK, err := admitted(env.Resource.HolderWrite(ctx, a, key, "old-owner"), lease.ErrNotHeld)
	if err != nil {
		return nil, nil, err
	}
	bOK, err := admitted(env.Resource.HolderWrite(ctx, b, key, "new-owner"), lease.ErrNotHeld)
	if err != nil {
		return nil, nil, err
	}
	if !bOK {
		return nil, nil, errors.New("the holder check refused the current holder B")
	}
	return []KV{{"ttlBlindAccepted", strconv.FormatBool(blind)}, {"strictHolderRejected", strconv.FormatBool(!aOK)}}, nil, nil
}

func unconditionalWriteOverwrites(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("unconditional-write-overwrites")
	_, b, err := expiredThenTaken(ctx, env, key, 150*time.Millisecond, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer b.Release(ctx)
	res := key + "/resource"
	if err := env.Resource.PlainWrite(ctx, res, "new-owner"); err != nil {
		return nil, nil, err
	}
	// A wakes up and writes with a plain UPDATE.
	if err := env.Resource.PlainWrite(ctx, res, "old-owner"); err != nil {
		return nil, nil, err
	}
	v, err := env.Resource.Read(ctx, res)
	if err != nil {
		return nil, nil, err
	}
	return []KV{{"staleOverwrite", strconv.FormatBool(v == "old-owner")}}, nil, nil
}

// staleRelease: A's lease really expires, B takes the key, A releases with
// its own token, then B releases.
func staleRelease(ctx context.Context, env *Env, key string, aTTL time.Duration) (staleDeleted, retained, ownerDeleted bool, err error) {
	a, b, err := expiredThenTaken(ctx, env, key, aTTL, 10*time.Second)
	if err != nil {
		return false, false, false, err
	}
	if staleDeleted, err = released(env.Leases.Release(ctx, key, a.Token().Reveal())); err != nil {
		return false, false, false, err
	}
	info, err := env.Leases.Inspect(ctx, key)
	if err != nil {
		return false, false, false, err
	}
	retained = info.Held && info.Fence == b.Fence()
	if ownerDeleted, err = released(env.Leases.Release(ctx, key, b.Token().Reveal())); err != nil {
		return false, false, false, err
	}
	if info, err = env.Leases.Inspect(ctx, key); err != nil {
		return false, false, false, err
	}
	if info.Held {
		return false, false, false, errors.New("the key is still held after the owner's release")
	}
	return staleDeleted, retained, ownerDeleted, nil
}

// released reports whether a release deleted the lock.
func released(err error) (bool, error) {
	return admitted(err, lease.ErrNotHeld)
}

func redisRelease(ctx context.Context, env *Env) ([]KV, []KV, error) {
	stale, kept, owner, err := staleRelease(ctx, env, env.Key("redis-release"), 100*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	return []KV{{"stale-release", b01(stale)}, {"current-owner-preserved", strconv.FormatBool(kept)}, {"owner-release", b01(owner)}}, nil, nil
}

func delexRelease(ctx context.Context, env *Env) ([]KV, []KV, error) {
	stale, kept, owner, err := staleRelease(ctx, env, env.Key("delex-release"), 150*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	notes, err := releasePath(ctx, env)
	return []KV{{"expiredOwnerDelete", b01(stale)}, {"newOwnerRetained", strconv.FormatBool(kept)}, {"matchingOwnerDelete", b01(owner)}}, notes, err
}

func releasePath(ctx context.Context, env *Env) ([]KV, error) {
	if env.ReleasePath == nil {
		return nil, nil
	}
	p, err := env.ReleasePath(ctx)
	if err != nil {
		return nil, err
	}
	return []KV{{"path", p}}, nil
}

func luaRelease(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("lua-release")
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		return nil, nil, err
	}
	l, err := lk.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	wrong, err := released(env.Leases.Release(ctx, key, lease.NewToken()))
	if err != nil {
		return nil, nil, err
	}
	matching, err := released(env.Leases.Release(ctx, key, l.Token().Reveal()))
	if err != nil {
		return nil, nil, err
	}
	notes, err := releasePath(ctx, env)
	return []KV{{"luaWrongOwner", b01(wrong)}, {"luaMatchingOwner", b01(matching)}}, notes, err
}

func fixedLeaseExpires(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("fixed-lease-expires")
	// A two-second lease (tryLock with a fixed lease time), then three
	// seconds of work. The key is new, so the acquire does not wait; it is
	// bounded by the run's context, not by a time budget of its own, which
	// a busy store could miss.
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		return nil, nil, err
	}
	l, err := lk.Acquire(ctx, key, 2*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer l.Release(ctx)
	if err := pause(ctx, 3*time.Second); err != nil {
		return nil, nil, err
	}
	owner, err := stillOwner(ctx, env.Leases, l)
	return []KV{{"still.owner", strconv.FormatBool(owner)}}, nil, err
}

func keepaliveHolds(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("keepalive-holds")
	var owner bool
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		return nil, nil, err
	}
	err = lk.Do(ctx, key, 2*time.Second, func(ctx context.Context, l *lease.Lease) error {
		if err := pause(ctx, 3*time.Second); err != nil {
			return err
		}
		var err error
		owner, err = stillOwner(ctx, env.Leases, l)
		return err
	})
	return []KV{{"still.owner", strconv.FormatBool(owner)}}, nil, err
}

// stillOwner asks the store whether l is still the current tenure.
func stillOwner(ctx context.Context, s lease.Store, l *lease.Lease) (bool, error) {
	info, err := s.Inspect(ctx, l.Key())
	if err != nil {
		return false, err
	}
	return l.Err() == nil && info.Held && info.Fence == l.Fence(), nil
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func fenceFromCounter(ctx context.Context, env *Env) ([]KV, []KV, error) {
	key := env.Key("fence-from-counter")
	// Two tenures minted by the store: the older one released, the newer
	// one granted afterwards.
	lk, err := lease.New(env.Leases, nil)
	if err != nil {
		return nil, nil, err
	}
	a, err := lk.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	if err := a.Release(ctx); err != nil {
		return nil, nil, err
	}
	b, err := lk.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer b.Release(ctx)
	kvs, err := staleFenceStory(ctx, env.Ledger, key+"/ledger", a.Fence(), b.Fence())
	return kvs, []KV{{"fences", fmt.Sprintf("%d<%d", a.Fence(), b.Fence())}}, err
}
