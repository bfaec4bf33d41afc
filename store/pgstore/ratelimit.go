package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
)

// The rate limit tables and the functions that run the algorithms. The
// functions are created with the tables (Migrate creates what is missing);
// a later change of the functions will come with new table names.
func init() {
	registerTable(table{name: "ratelimits", create: []string{
		`CREATE TABLE IF NOT EXISTS $S.ratelimits (
	key        text PRIMARY KEY,
	alg        smallint NOT NULL,
	a          bigint NOT NULL,
	b          bigint NOT NULL,
	c          bigint NOT NULL,
	log_at     bigint[] NOT NULL DEFAULT '{}',
	log_n      bigint[] NOT NULL DEFAULT '{}',
	expires_us bigint NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ratelimits_expires_idx ON $S.ratelimits (expires_us)`,
		rateEvalFunc,
		rateDecideFunc,
	}})
	registerTable(table{name: "ratelimit_permits", create: []string{
		`CREATE TABLE IF NOT EXISTS $S.ratelimit_permits (
	key        text PRIMARY KEY,
	last_fence bigint NOT NULL,
	ids        text[] NOT NULL,
	fences     bigint[] NOT NULL,
	expires    bigint[] NOT NULL,
	expires_us bigint NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ratelimit_permits_expires_idx ON $S.ratelimit_permits (expires_us)`,
		ratePermitFunc,
	}})
}

// rateEvalFunc judges one limit at now_us (µs since the epoch) and, when
// consume is set, stores the new state. It returns {allowed, remaining,
// retry after µs, reset after µs}. The arithmetic is ratelimit.Evaluate's,
// step for step (the sliding window estimate in float8, like Go's float64
// and Lua's doubles); the conformance suite checks them against each other.
// The caller holds the key's advisory lock.
const rateEvalFunc = `CREATE OR REPLACE FUNCTION $S.ratelimit_eval(k text, alg int, r bigint, p bigint, bu bigint, n bigint, now_us bigint, consume boolean)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
	s $S.ratelimits%ROWTYPE;
	live boolean;
	ok boolean;
	rem bigint := 0; retry bigint := 0; rst bigint := 0;
	tq bigint; tr bigint; taua bigint; taub bigint; ta bigint; tb bigint; sa bigint; sb bigint; sc bigint;
	na bigint; nb bigint; aa bigint; ab bigint; ba bigint; bb bigint; xa bigint; xb bigint;
	fend bigint; cnt bigint; used bigint;
	w bigint; sw bigint; pp bigint; cc bigint; cu bigint; lft bigint; est float8;
	lo bigint; hi bigint; mid bigint; wm bigint; pm bigint; cm bigint;
	ats bigint[] := '{}'; nss bigint[] := '{}'; newest bigint := -1; ts bigint; need bigint; freed bigint; i int;
BEGIN
	SELECT * INTO s FROM $S.ratelimits WHERE key = k;
	live := FOUND AND s.expires_us > now_us;
	IF FOUND AND (s.alg <> alg OR coalesce(array_length(s.log_at, 1), 0) <> coalesce(array_length(s.log_n, 1), 0)) THEN
		RAISE EXCEPTION 'pgstore: malformed rate limit state at %', k;
	END IF;
	IF alg = 0 THEN
		-- GCRA: times are pairs a + b/r.
		tq := p / r; tr := p % r;
		taua := bu * tq + (bu * tr) / r; taub := (bu * tr) % r;
		ta := now_us; tb := 0;
		IF live THEN
			sa := s.a; sb := s.b; sc := s.c;
			IF sc < 1 OR sb < 0 OR sb >= sc THEN
				RAISE EXCEPTION 'pgstore: malformed rate limit state at %', k;
			END IF;
			IF sc <> r THEN
				sb := (sb * r + sc - 1) / sc;
				IF sb >= r THEN sa := sa + 1; sb := sb - r; END IF;
			END IF;
			IF sa > now_us OR (sa = now_us AND sb > 0) THEN ta := sa; tb := sb; END IF;
		END IF;
		na := ta + n * tq + (n * tr) / r; nb := tb + (n * tr) % r;
		IF nb >= r THEN na := na + 1; nb := nb - r; END IF;
		aa := na - taua; ab := nb - taub;
		IF ab < 0 THEN aa := aa - 1; ab := ab + r; END IF;
		ok := aa < now_us OR (aa = now_us AND ab = 0);
		IF consume THEN ba := na; bb := nb; ELSE ba := ta; bb := tb; END IF;
		xa := taua - (ba - now_us); xb := taub - bb;
		IF xb < 0 THEN xa := xa - 1; xb := xb + r; END IF;
		IF xa >= 0 THEN rem := least(div(xa::numeric * r + xb, p)::bigint, bu); END IF;
		IF NOT ok THEN retry := aa - now_us + CASE WHEN ab > 0 THEN 1 ELSE 0 END; END IF;
		rst := greatest(ba - now_us + CASE WHEN bb > 0 THEN 1 ELSE 0 END, 0);
		IF consume THEN
			INSERT INTO $S.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
			VALUES (k, alg, na, nb, r, '{}', '{}', na + CASE WHEN nb > 0 THEN 1 ELSE 0 END)
			ON CONFLICT (key) DO UPDATE SET alg = excluded.alg, a = excluded.a, b = excluded.b, c = excluded.c,
				log_at = excluded.log_at, log_n = excluded.log_n, expires_us = excluded.expires_us;
		END IF;
	ELSIF alg = 1 THEN
		-- Fixed window: a = end of the window, b = units in it.
		fend := now_us + p; cnt := 0;
		IF live THEN fend := s.a; cnt := s.b; END IF;
		ok := cnt + n <= r;
		used := cnt + CASE WHEN consume THEN n ELSE 0 END;
		rem := r - used;
		IF NOT ok THEN retry := fend - now_us; END IF;
		IF used > 0 THEN rst := fend - now_us; END IF;
		IF consume THEN
			INSERT INTO $S.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
			VALUES (k, alg, fend, cnt + n, 0, '{}', '{}', fend)
			ON CONFLICT (key) DO UPDATE SET alg = excluded.alg, a = excluded.a, b = excluded.b, c = excluded.c,
				log_at = excluded.log_at, log_n = excluded.log_n, expires_us = excluded.expires_us;
		END IF;
	ELSIF alg = 2 THEN
		-- Sliding log: log_at/log_n, oldest first; an entry counts while
		-- now < at + p.
		cnt := 0;
		IF live THEN
			FOR i IN 1 .. coalesce(array_length(s.log_at, 1), 0) LOOP
				IF s.log_at[i] + p > now_us THEN
					ats := ats || s.log_at[i]; nss := nss || s.log_n[i];
					cnt := cnt + s.log_n[i]; newest := s.log_at[i];
				END IF;
			END LOOP;
		END IF;
		ok := cnt + n <= r;
		ts := greatest(now_us, newest);
		used := cnt + CASE WHEN consume THEN n ELSE 0 END;
		rem := r - used;
		IF NOT ok THEN
			need := cnt + n - r; freed := 0;
			FOR i IN 1 .. coalesce(array_length(ats, 1), 0) LOOP
				freed := freed + nss[i];
				IF freed >= need THEN retry := ats[i] + p - now_us; EXIT; END IF;
			END LOOP;
		END IF;
		IF consume THEN newest := ts; END IF;
		IF newest >= 0 THEN rst := newest + p - now_us; END IF;
		IF consume THEN
			IF coalesce(array_length(ats, 1), 0) > 0 AND ats[array_length(ats, 1)] = ts THEN
				nss[array_length(nss, 1)] := nss[array_length(nss, 1)] + n;
			ELSE
				ats := ats || ts; nss := nss || n;
			END IF;
			INSERT INTO $S.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
			VALUES (k, alg, 0, 0, 0, ats, nss, ts + p)
			ON CONFLICT (key) DO UPDATE SET alg = excluded.alg, a = excluded.a, b = excluded.b, c = excluded.c,
				log_at = excluded.log_at, log_n = excluded.log_n, expires_us = excluded.expires_us;
		END IF;
	ELSIF alg = 3 THEN
		-- Sliding window counter: a = window index, b = previous count,
		-- c = current count.
		w := now_us / p;
		sw := w; pp := 0; cc := 0;
		IF live THEN sw := s.a; END IF;
		IF live AND w - sw = 0 THEN pp := s.b; cc := s.c;
		ELSIF live AND w - sw = 1 THEN pp := s.c; cc := 0;
		END IF;
		lft := p - (now_us - w * p);
		est := pp::float8 * (lft::float8 / p::float8);
		ok := (cc + n)::float8 + est <= r::float8;
		cu := cc + CASE WHEN consume THEN n ELSE 0 END;
		rem := greatest(0, least(r, floor((r - cu)::float8 - est)::bigint));
		IF NOT ok THEN
			lo := now_us + 1; hi := (w + 2) * p;
			WHILE lo < hi LOOP
				mid := lo + (hi - lo) / 2;
				wm := mid / p;
				IF wm - w = 0 THEN pm := pp; cm := cc;
				ELSIF wm - w = 1 THEN pm := cc; cm := 0;
				ELSE pm := 0; cm := 0;
				END IF;
				IF (cm + n)::float8 + pm::float8 * ((p - (mid - wm * p))::float8 / p::float8) <= r::float8 THEN
					hi := mid;
				ELSE
					lo := mid + 1;
				END IF;
			END LOOP;
			retry := lo - now_us;
		END IF;
		IF cu > 0 THEN rst := (w + 2) * p - now_us; ELSIF pp > 0 THEN rst := (w + 1) * p - now_us; END IF;
		IF consume THEN
			INSERT INTO $S.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
			VALUES (k, alg, w, pp, cc + n, '{}', '{}', (w + 2) * p)
			ON CONFLICT (key) DO UPDATE SET alg = excluded.alg, a = excluded.a, b = excluded.b, c = excluded.c,
				log_at = excluded.log_at, log_n = excluded.log_n, expires_us = excluded.expires_us;
		END IF;
	ELSE
		RAISE EXCEPTION 'pgstore: invalid ratelimit arguments (algorithm %)', alg;
	END IF;
	RETURN ARRAY[CASE WHEN ok THEN 1 ELSE 0 END, rem, retry, rst];
END
$fn$`

// rateDecideFunc judges several limits all or nothing: it takes each key's
// advisory lock (in hash order, shared for a peek), reads the clock once,
// judges every limit, and only when all allow (and do_commit) judges them
// again consuming. It returns {now, allowed_1, remaining_1, retry_1,
// reset_1, ...}. With do_sweep it also deletes up to 200 expired rows.
const rateDecideFunc = `CREATE OR REPLACE FUNCTION $S.ratelimit_decide(keys text[], algs int[], rates bigint[], periods bigint[], bursts bigint[], ns bigint[], do_commit boolean, do_sweep boolean)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
	cnt int := coalesce(array_length(keys, 1), 0);
	h bigint;
	now_us bigint;
	res bigint[];
	out bigint[];
	all_ok boolean := true;
	i int;
BEGIN
	IF cnt < 1 OR cnt > 16 OR coalesce(array_length(algs, 1), 0) <> cnt OR coalesce(array_length(rates, 1), 0) <> cnt
		OR coalesce(array_length(periods, 1), 0) <> cnt OR coalesce(array_length(bursts, 1), 0) <> cnt
		OR coalesce(array_length(ns, 1), 0) <> cnt THEN
		RAISE EXCEPTION 'pgstore: invalid ratelimit arguments (shape)';
	END IF;
	FOR i IN 1 .. cnt LOOP
		IF rates[i] < 1 OR rates[i] > 50000000 OR periods[i] < 1000 OR periods[i] > 31622400000000
			OR bursts[i] < 1 OR bursts[i] > 50000000 OR ns[i] < 0 OR ns[i] > bursts[i]
			OR (do_commit AND ns[i] < 1) OR algs[i] < 0 OR algs[i] > 3 THEN
			RAISE EXCEPTION 'pgstore: invalid ratelimit arguments (limit %)', i;
		END IF;
	END LOOP;
	FOR h IN SELECT DISTINCT hashtextextended(x, 7261) AS hh FROM unnest(keys) AS x ORDER BY hh LOOP
		IF do_commit THEN
			PERFORM pg_advisory_xact_lock(h);
		ELSE
			PERFORM pg_advisory_xact_lock_shared(h);
		END IF;
	END LOOP;
	now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	FOR i IN 1 .. cnt LOOP
		res := $S.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, false);
		all_ok := all_ok AND res[1] = 1;
	END LOOP;
	out := ARRAY[now_us];
	FOR i IN 1 .. cnt LOOP
		IF do_commit AND all_ok THEN
			res := $S.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, true);
		ELSE
			res := $S.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, false);
		END IF;
		out := out || res;
	END LOOP;
	IF do_sweep THEN
		DELETE FROM $S.ratelimits WHERE key IN (
			SELECT key FROM $S.ratelimits WHERE expires_us <= now_us LIMIT 200 FOR UPDATE SKIP LOCKED);
		DELETE FROM $S.ratelimit_permits WHERE key IN (
			SELECT key FROM $S.ratelimit_permits WHERE expires_us <= now_us LIMIT 200 FOR UPDATE SKIP LOCKED);
	END IF;
	RETURN out;
END
$fn$`

// ratePermitFunc acquires ('a'), renews ('r') or releases ('x') permit id
// on k, under k's advisory lock, on the server's clock. It returns {held,
// fence, in use, retry after µs, now}. The row lives until its last permit
// expired and the clock passed the last fence.
const ratePermitFunc = `CREATE OR REPLACE FUNCTION $S.ratelimit_permit(k text, op text, id text, permits int, ttl bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
	s $S.ratelimit_permits%ROWTYPE;
	now_us bigint;
	last bigint := 0;
	ids text[] := '{}'; fs bigint[] := '{}'; es bigint[] := '{}';
	pos int := 0; fence bigint := 0; soonest bigint; untl bigint; i int;
BEGIN
	IF op NOT IN ('a', 'r', 'x') OR id IS NULL OR length(id) < 1 OR length(id) > 64
		OR (op = 'a' AND (permits < 1 OR permits > 10000))
		OR (op <> 'x' AND (ttl < 1000 OR ttl > 86400000000)) THEN
		RAISE EXCEPTION 'pgstore: invalid ratelimit permit arguments';
	END IF;
	PERFORM pg_advisory_xact_lock(hashtextextended(k, 7261));
	now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	SELECT * INTO s FROM $S.ratelimit_permits WHERE key = k;
	IF FOUND AND s.expires_us > now_us THEN
		IF coalesce(array_length(s.ids, 1), 0) <> coalesce(array_length(s.fences, 1), 0)
			OR coalesce(array_length(s.ids, 1), 0) <> coalesce(array_length(s.expires, 1), 0) THEN
			RAISE EXCEPTION 'pgstore: malformed permit state at %', k;
		END IF;
		last := s.last_fence;
		FOR i IN 1 .. coalesce(array_length(s.ids, 1), 0) LOOP
			IF s.expires[i] > now_us THEN
				ids := ids || s.ids[i]; fs := fs || s.fences[i]; es := es || s.expires[i];
				IF s.ids[i] = id THEN pos := coalesce(array_length(ids, 1), 0); END IF;
			END IF;
		END LOOP;
	END IF;
	IF op = 'x' OR op = 'r' THEN
		IF pos = 0 THEN
			RETURN ARRAY[0, 0, coalesce(array_length(ids, 1), 0), 0, now_us];
		END IF;
		fence := fs[pos];
		IF op = 'x' THEN
			ids := ids[1:pos-1] || ids[pos+1:]; fs := fs[1:pos-1] || fs[pos+1:]; es := es[1:pos-1] || es[pos+1:];
		ELSE
			es[pos] := now_us + ttl;
		END IF;
	ELSIF pos > 0 THEN
		fence := fs[pos];
		es[pos] := now_us + ttl;
	ELSIF coalesce(array_length(ids, 1), 0) >= permits THEN
		SELECT min(e) INTO soonest FROM unnest(es) AS e;
		RETURN ARRAY[0, 0, coalesce(array_length(ids, 1), 0), soonest - now_us, now_us];
	ELSE
		fence := greatest(last + 1, now_us);
		last := fence;
		ids := ids || id; fs := fs || fence; es := es || (now_us + ttl);
	END IF;
	untl := last + 1;
	FOR i IN 1 .. coalesce(array_length(es, 1), 0) LOOP
		untl := greatest(untl, es[i]);
	END LOOP;
	IF untl <= now_us THEN
		DELETE FROM $S.ratelimit_permits WHERE key = k;
	ELSE
		INSERT INTO $S.ratelimit_permits AS t (key, last_fence, ids, fences, expires, expires_us)
		VALUES (k, last, ids, fs, es, untl)
		ON CONFLICT (key) DO UPDATE SET last_fence = excluded.last_fence, ids = excluded.ids,
			fences = excluded.fences, expires = excluded.expires, expires_us = excluded.expires_us;
	END IF;
	RETURN ARRAY[1, fence, coalesce(array_length(ids, 1), 0), 0, now_us];
END
$fn$`

// rateSweepEvery is how many decisions pass between two sweeps of expired
// rows (each sweep deletes up to 200 rows of each table).
const rateSweepEvery = 128

type rateQueries struct {
	decide, permit, reset, ttl string
}

// Limits returns the store's ratelimit.Store view. Every call is one
// statement (one round trip): a PL/pgSQL function (created by Migrate) that
// takes the key's advisory lock (xact-scoped, in a consistent order for
// groups; shared for peeks), reads clock_timestamp() once, and runs the
// algorithms of ratelimit.Evaluate. State lives in the ratelimits and
// ratelimit_permits tables with an expires_us column (µs since the epoch):
// a row past it counts as absent; decisions delete up to 200 expired rows
// every 128 calls, and SweepLimits deletes them on demand.
func (s *Store) Limits() ratelimit.Store {
	return s.view("ratelimit", func() any {
		sch := pgx.Identifier{s.schema}.Sanitize()
		return &rateLimits{s: s, q: rateQueries{
			// Arrays travel as text (see pgArray), so that every driver
			// sends and reads them alike.
			decide: `SELECT ` + sch + `.ratelimit_decide($1::text::text[], $2::text::int[], $3::text::bigint[], $4::text::bigint[], $5::text::bigint[], $6::text::bigint[], $7, $8)::text`,
			permit: `SELECT ` + sch + `.ratelimit_permit($1, $2, $3, $4::int, $5::bigint)::text`,
			reset:  `DELETE FROM ` + sch + `.ratelimits WHERE key = ANY($1::text::text[])`,
			ttl: `SELECT expires_us - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM ` + sch + `.ratelimits
WHERE key = $1`,
		}}
	}).(*rateLimits)
}

// SweepLimits deletes the rate limit and permit rows that expired and
// returns how many it deleted.
func (s *Store) SweepLimits(ctx context.Context) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	sch := pgx.Identifier{s.schema}.Sanitize()
	var n int64
	for _, t := range []string{"ratelimits", "ratelimit_permits"} {
		k, err := s.db.exec(ctx, `DELETE FROM `+sch+`.`+t+` WHERE expires_us <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`)
		if err != nil {
			return n, rateErr(s.wrap(ctx, "sweep rate limits", err))
		}
		n += k
	}
	return n, nil
}

type rateLimits struct {
	s     *Store
	q     rateQueries
	calls atomic.Int64
}

// rateErr adds ratelimit.ErrUnavailable to an error that wraps
// lease.ErrUnavailable.
func rateErr(err error) error {
	if errors.Is(err, lease.ErrUnavailable) {
		return fmt.Errorf("%w: %w", ratelimit.ErrUnavailable, err)
	}
	if errors.Is(err, lease.ErrInvalid) {
		return fmt.Errorf("%w: %w", ratelimit.ErrInvalid, err)
	}
	return err
}

// check reports a bad Options.Schema (keys are valid UTF-8 without NUL
// and permit ids visible ASCII already, as PostgreSQL text needs).
func (l *rateLimits) check() error {
	if l.s.err != nil {
		return rateErr(l.s.err)
	}
	return nil
}

func (l *rateLimits) Decide(ctx context.Context, reqs []ratelimit.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := ratelimit.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	n := len(reqs)
	keys := make([]string, n)
	algs := make([]int32, n)
	rates, periods, bursts, costs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range reqs {
		keys[i] = r.Key.String()
		algs[i] = int32(r.Algorithm)
		rates[i] = int64(r.Limit.Rate)
		periods[i] = int64(r.Limit.Period / time.Microsecond)
		bursts[i] = int64(r.Limit.Burst)
		costs[i] = int64(r.N)
	}
	sweep := commit && l.calls.Add(1)%rateSweepEvery == 0
	var text string
	err := l.s.db.queryRow(ctx, l.q.decide, []any{pgArray(keys), pgArray(algs), pgArray(rates), pgArray(periods),
		pgArray(bursts), pgArray(costs), commit, sweep}, &text)
	if err != nil {
		return nil, rateErr(l.s.wrap(ctx, fmt.Sprintf("rate limit %q", keys[0]), err))
	}
	out, err := parseInt64s(text)
	if err != nil {
		return nil, fmt.Errorf("pgstore: rate limit %q: %w", keys[0], err)
	}
	if len(out) != 1+4*n {
		return nil, fmt.Errorf("pgstore: rate limit %q: unexpected reply of %d values", keys[0], len(out))
	}
	at := time.UnixMicro(out[0])
	ds := make([]ratelimit.Decision, n)
	for i, r := range reqs {
		v := out[1+4*i:]
		ds[i] = ratelimit.Decision{
			Allowed:    v[0] == 1,
			Remaining:  int(v[1]),
			RetryAfter: time.Duration(v[2]) * time.Microsecond,
			ResetAfter: time.Duration(v[3]) * time.Microsecond,
			Limit:      r.Limit,
			Algorithm:  r.Algorithm,
			At:         at,
		}
	}
	return ds, nil
}

func (l *rateLimits) Reset(ctx context.Context, keys []ratelimit.StateKey) error {
	if err := ratelimit.ValidateStateKeys(keys); err != nil {
		return err
	}
	if err := l.check(); err != nil {
		return err
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = k.String()
	}
	if _, err := l.s.db.exec(ctx, l.q.reset, pgArray(ks)); err != nil {
		return rateErr(l.s.wrap(ctx, fmt.Sprintf("reset rate limit %q", ks[0]), err))
	}
	return nil
}

func (l *rateLimits) permit(ctx context.Context, op string, key ratelimit.StateKey, id string, permits int, ttl time.Duration) (ratelimit.PermitGrant, bool, error) {
	if err := l.check(); err != nil {
		return ratelimit.PermitGrant{}, false, err
	}
	var text string
	err := l.s.db.queryRow(ctx, l.q.permit, []any{key.String(), op, id, int32(permits), int64(ttl / time.Microsecond)}, &text)
	if err != nil {
		return ratelimit.PermitGrant{}, false, rateErr(l.s.wrap(ctx, fmt.Sprintf("permit %q", key.String()), err))
	}
	v, err := parseInt64s(text)
	if err != nil {
		return ratelimit.PermitGrant{}, false, fmt.Errorf("pgstore: permit %q: %w", key.String(), err)
	}
	if len(v) != 5 {
		return ratelimit.PermitGrant{}, false, fmt.Errorf("pgstore: permit %q: unexpected reply", key.String())
	}
	g := ratelimit.PermitGrant{
		Acquired:   v[0] == 1,
		Fence:      uint64(v[1]),
		InUse:      int(v[2]),
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		At:         time.UnixMicro(v[4]),
	}
	if g.Acquired && op != "x" {
		g.TTL = ttl
	}
	return g, v[0] == 1, nil
}

func (l *rateLimits) AcquirePermit(ctx context.Context, key ratelimit.StateKey, id string, permits int, ttl time.Duration) (ratelimit.PermitGrant, error) {
	if err := ratelimit.ValidatePermit(key, id, permits, ttl); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	g, _, err := l.permit(ctx, "a", key, id, permits, ttl)
	return g, err
}

func (l *rateLimits) RenewPermit(ctx context.Context, key ratelimit.StateKey, id string, ttl time.Duration) (ratelimit.PermitGrant, error) {
	if err := ratelimit.ValidatePermit(key, id, -1, ttl); err != nil {
		return ratelimit.PermitGrant{}, err
	}
	g, held, err := l.permit(ctx, "r", key, id, 1, ttl)
	if err != nil {
		return ratelimit.PermitGrant{}, err
	}
	if !held {
		return g, ratelimit.ErrPermitLost
	}
	return g, nil
}

func (l *rateLimits) ReleasePermit(ctx context.Context, key ratelimit.StateKey, id string) error {
	if err := ratelimit.ValidatePermit(key, id, -1, -1); err != nil {
		return err
	}
	_, held, err := l.permit(ctx, "x", key, id, 1, 0)
	if err != nil {
		return err
	}
	if !held {
		return ratelimit.ErrPermitLost
	}
	return nil
}

// LimitTTL reports whether the store holds live rate limit state under k
// (see ratelimit.Limiter.StateKey) and how long until it expires on the
// server's clock.
func (s *Store) LimitTTL(ctx context.Context, k ratelimit.StateKey) (time.Duration, bool, error) {
	if err := ratelimit.ValidateStateKeys([]ratelimit.StateKey{k}); err != nil {
		return 0, false, err
	}
	l := s.Limits().(*rateLimits)
	if err := l.check(); err != nil {
		return 0, false, err
	}
	var left int64
	err := s.db.queryRow(ctx, l.q.ttl, []any{k.String()}, &left)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, rateErr(s.wrap(ctx, fmt.Sprintf("rate limit ttl %q", k.String()), err))
	case left <= 0:
		return 0, false, nil
	}
	return time.Duration(left) * time.Microsecond, true, nil
}
