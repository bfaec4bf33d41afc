package proof

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(&workload{
		name:    "fence-floor",
		summary: "workers take leases, let every other grant's fence run an hour ahead of the clock (as a clock that steps back later leaves it), release, and have the store reclaim what the ended lease left (its sweep, or its keys' expiry) before the key is taken again (on PostgreSQL, half the grant statements are also held inside the server for up to 20 ms between their read and their write, as a descheduled backend is, so that sweeps run in between): every grant's fence is above every fence the key had, although nothing of the key is kept (the store's fence floor carries it); the control drops the records with no floor and shows fences going back",
		supports: func(k storeurl.Kind) string {
			if k == storeurl.Etcd {
				return "a fence on etcd is the revision that created the lock: it never goes back, and the store keeps no floor to check"
			}
			return ""
		},
		setup:  floorSetup,
		worker: floorWorker,
		check:  floorCheck,
	})
}

// floorAhead is how far a raised fence is put ahead of the one granted:
// an hour of a clock in microseconds.
const floorAhead = uint64(time.Hour / time.Microsecond)

// floorKey names lease key i of mode.
func floorKey(w *workerEnv, mode string, i int) string {
	return w.env.Key("ff/" + mode + "/" + strconv.Itoa(i))
}

// floorStallMs is the longest a stalled grant statement is held, in
// milliseconds.
const floorStallMs = 20

// floorSetup, on PostgreSQL, stalls the run's grants of its fence-floor
// keys: a BEFORE INSERT trigger on the lab schema's leases table, which
// fires once a grant statement has read the fence floor (at its start)
// and before it looks for the key's row, sleeps up to floorStallMs for half
// of them, so that a sweep can raise the floor and drop the key's row
// meanwhile, as on a busy server. The trigger stalls only keys under a
// prefix registered in its table, until the registration's end (an hour;
// later runs delete ended registrations).
func floorSetup(ctx context.Context, w *workerEnv) error {
	if w.kind != storeurl.Postgres {
		return nil
	}
	tx, err := w.pg.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock(7707, 0)`,
		`CREATE TABLE IF NOT EXISTS ` + floorStall + ` (prefix text PRIMARY KEY, max_ms int NOT NULL, until timestamptz NOT NULL)`,
		`DELETE FROM ` + floorStall + ` WHERE until <= clock_timestamp()`,
		`CREATE OR REPLACE FUNCTION ` + floorStall + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE m int;
BEGIN
	SELECT s.max_ms INTO m FROM ` + floorStall + ` AS s
		WHERE left(NEW.key, length(s.prefix)) = s.prefix AND s.until > clock_timestamp() LIMIT 1;
	IF m IS NOT NULL AND random() < 0.5 THEN
		PERFORM pg_sleep(random() * m / 1000.0);
	END IF;
	RETURN NEW;
END $fn$`,
		`DO $do$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'proof_grant_stall' AND tgrelid = '` + w.env.PG.Schema() + `.leases'::regclass) THEN
		CREATE TRIGGER proof_grant_stall BEFORE INSERT ON ` + w.env.PG.Schema() + `.leases FOR EACH ROW EXECUTE FUNCTION ` + floorStall + `();
	END IF;
END $do$`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("fence-floor: stall grants: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+floorStall+` (prefix, max_ms, until) VALUES ($1, $2, clock_timestamp() + interval '1 hour')
		ON CONFLICT (prefix) DO UPDATE SET max_ms = excluded.max_ms, until = excluded.until`, w.env.Key("ff/"), floorStallMs); err != nil {
		return fmt.Errorf("fence-floor: stall grants: %w", err)
	}
	return tx.Commit(ctx)
}

// floorStall names the stall's table and trigger function.
const floorStall = "tenure_lab.proof_grant_stall"

func floorWorker(ctx context.Context, w *workerEnv) error {
	// The worker's sweeper reclaims the guarded keys' ended leases all
	// along, while grants are under way; floorLoop leaves some of them to
	// it.
	var keys []string
	for i := range counterKeys(w.spec) {
		keys = append(keys, floorKey(w, Guarded, i))
	}
	sctx, stop := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for sctx.Err() == nil {
			w.env.Reclaim(sctx, keys) // a failed pass is tried again
			w.sleep(sctx, 2*time.Millisecond)
		}
	}()
	err := perKey(ctx, w, floorKey, floorLoop)
	stop()
	<-swept
	return err
}

// errNotRaised: the lease ended before its fence could be raised.
var errNotRaised = errors.New("the lease was no longer held")

// floorLoop: acquire the key; every other tenure, raise its fence an hour
// ahead (recorded as a "raise" with that fence); release; then have the
// store reclaim the ended lease (in the control: drop its record, keeping
// no floor). The next acquire must still get a greater fence. Every other
// raised tenure of the guarded mode is left to the worker's sweeper
// instead, so the next acquire runs while that sweeper drops the key's
// record.
func floorLoop(ctx context.Context, w *workerEnv, mode, key string) error {
	lk, err := lease.New(w.env.Leases, &lease.Options{RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		return err
	}
	ttl := w.spec.TTL
	for n := 0; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "acquire", key, "", 0)
		actx, cancel := context.WithTimeout(ctx, 20*ttl)
		l, err := lk.Acquire(actx, key, ttl)
		cancel()
		if err != nil {
			p.End("", 0, err)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if n%2 == 0 {
			f := l.Fence() + floorAhead
			rp := w.rec.Invoke(mode, "raise", key, "", f)
			ok, err := w.env.RaiseFence(octx, key, l.Token().Reveal(), f, mode == Control)
			if err == nil && !ok {
				err = errNotRaised
			}
			rp.End("", f, err)
		}
		w.sleep(ctx, w.spec.Think)
		relp := w.rec.Invoke(mode, "release", key, "", l.Fence())
		relp.End("", l.Fence(), l.Release(octx))
		if mode == Guarded && n%4 == 0 {
			ocancel()
			continue // the sweeper's
		}
		cp := w.rec.Invoke(mode, "reclaim", key, "", 0)
		if mode == Guarded {
			cp.End("", 0, w.env.Reclaim(octx, []string{key}))
		} else {
			_, err := w.env.DropLease(octx, []string{key})
			cp.End("", 0, err)
		}
		ocancel()
	}
	return nil
}

// floorCheck: per key, every grant's fence is above the fences the key had
// (granted, or raised) before the grant was requested.
func floorCheck(_ context.Context, w *workerEnv, _ *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	acq := h.Select(mode, "acquire")
	m.countOps(acq)
	byKey := map[string][]Op{}
	for _, op := range acq {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, op := range h.Select(mode, "raise") {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, ops := range byKey {
		grantOrder(ops, &m)
	}
	return m
}
