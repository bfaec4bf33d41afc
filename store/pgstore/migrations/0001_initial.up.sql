-- tenure pgstore migration 1: the tables of leases, fence guards,
-- idempotency records, rate limits, sessions and schedules, and the
-- version table. {{schema}} stands for the quoted schema name ("tenure" by
-- default); `tenure migrate sql --schema NAME` prints this file resolved.
-- Every statement creates only what is missing, so the file also adopts
-- tables created by tenure before versions were recorded.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.leases (
	key        text PRIMARY KEY,
	token      text,
	fence      bigint NOT NULL,
	expires_at timestamptz
);

CREATE TABLE IF NOT EXISTS {{schema}}.fences (
	resource text PRIMARY KEY,
	fence    bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS {{schema}}.idempotency (
	scope       text NOT NULL,
	key         text NOT NULL,
	fingerprint text NOT NULL,
	token       text,
	fence       bigint NOT NULL,
	state       smallint NOT NULL,
	claim_until timestamptz,
	expires_at  timestamptz NOT NULL,
	failed      boolean NOT NULL DEFAULT false,
	message     text,
	value       bytea,
	PRIMARY KEY (scope, key)
);

CREATE INDEX IF NOT EXISTS idempotency_expires_idx ON {{schema}}.idempotency (expires_at);

CREATE TABLE IF NOT EXISTS {{schema}}.ratelimits (
	key        text PRIMARY KEY,
	alg        smallint NOT NULL,
	a          bigint NOT NULL,
	b          bigint NOT NULL,
	c          bigint NOT NULL,
	log_at     bigint[] NOT NULL DEFAULT '{}',
	log_n      bigint[] NOT NULL DEFAULT '{}',
	expires_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS ratelimits_expires_idx ON {{schema}}.ratelimits (expires_us);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION {{schema}}.ratelimit_eval(k text, alg int, r bigint, p bigint, bu bigint, n bigint, now_us bigint, consume boolean)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
	s {{schema}}.ratelimits%ROWTYPE;
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
	SELECT * INTO s FROM {{schema}}.ratelimits WHERE key = k;
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
			INSERT INTO {{schema}}.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
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
			INSERT INTO {{schema}}.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
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
			INSERT INTO {{schema}}.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
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
			INSERT INTO {{schema}}.ratelimits AS t (key, alg, a, b, c, log_at, log_n, expires_us)
			VALUES (k, alg, w, pp, cc + n, '{}', '{}', (w + 2) * p)
			ON CONFLICT (key) DO UPDATE SET alg = excluded.alg, a = excluded.a, b = excluded.b, c = excluded.c,
				log_at = excluded.log_at, log_n = excluded.log_n, expires_us = excluded.expires_us;
		END IF;
	ELSE
		RAISE EXCEPTION 'pgstore: invalid ratelimit arguments (algorithm %)', alg;
	END IF;
	RETURN ARRAY[CASE WHEN ok THEN 1 ELSE 0 END, rem, retry, rst];
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION {{schema}}.ratelimit_decide(keys text[], algs int[], rates bigint[], periods bigint[], bursts bigint[], ns bigint[], do_commit boolean, do_sweep boolean)
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
		res := {{schema}}.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, false);
		all_ok := all_ok AND res[1] = 1;
	END LOOP;
	out := ARRAY[now_us];
	FOR i IN 1 .. cnt LOOP
		IF do_commit AND all_ok THEN
			res := {{schema}}.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, true);
		ELSE
			res := {{schema}}.ratelimit_eval(keys[i], algs[i], rates[i], periods[i], bursts[i], ns[i], now_us, false);
		END IF;
		out := out || res;
	END LOOP;
	IF do_sweep THEN
		DELETE FROM {{schema}}.ratelimits WHERE key IN (
			SELECT key FROM {{schema}}.ratelimits WHERE expires_us <= now_us LIMIT 200 FOR UPDATE SKIP LOCKED);
		DELETE FROM {{schema}}.ratelimit_permits WHERE key IN (
			SELECT key FROM {{schema}}.ratelimit_permits WHERE expires_us <= now_us LIMIT 200 FOR UPDATE SKIP LOCKED);
	END IF;
	RETURN out;
END
$fn$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS {{schema}}.ratelimit_permits (
	key        text PRIMARY KEY,
	last_fence bigint NOT NULL,
	ids        text[] NOT NULL,
	fences     bigint[] NOT NULL,
	expires    bigint[] NOT NULL,
	expires_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS ratelimit_permits_expires_idx ON {{schema}}.ratelimit_permits (expires_us);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION {{schema}}.ratelimit_permit(k text, op text, id text, permits int, ttl bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
	s {{schema}}.ratelimit_permits%ROWTYPE;
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
	SELECT * INTO s FROM {{schema}}.ratelimit_permits WHERE key = k;
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
		DELETE FROM {{schema}}.ratelimit_permits WHERE key = k;
	ELSE
		INSERT INTO {{schema}}.ratelimit_permits AS t (key, last_fence, ids, fences, expires, expires_us)
		VALUES (k, last, ids, fs, es, untl)
		ON CONFLICT (key) DO UPDATE SET last_fence = excluded.last_fence, ids = excluded.ids,
			fences = excluded.fences, expires = excluded.expires, expires_us = excluded.expires_us;
	END IF;
	RETURN ARRAY[1, fence, coalesce(array_length(ids, 1), 0), 0, now_us];
END
$fn$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS {{schema}}.schedule_slots (
	job         text NOT NULL,
	slot_id     text NOT NULL,
	slot_time   timestamptz NOT NULL,
	state       text NOT NULL,
	node        text NOT NULL,
	attempts    integer NOT NULL,
	fence       bigint NOT NULL,
	started_at  timestamptz,
	finished_at timestamptz,
	error       text NOT NULL,
	retry_at    timestamptz,
	PRIMARY KEY (job, slot_id)
) WITH (fillfactor = 70);

CREATE INDEX IF NOT EXISTS schedule_slots_time ON {{schema}}.schedule_slots (job, slot_time);

CREATE TABLE IF NOT EXISTS {{schema}}.schedule_ledger (
	job          text NOT NULL,
	slot_id      text NOT NULL,
	fence        bigint NOT NULL,
	completed_at timestamptz NOT NULL,
	PRIMARY KEY (job, slot_id)
);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION {{schema}}.schedule_refuse(reason text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
	IF reason = 'completed' THEN
		RAISE EXCEPTION 'schedule: slot already completed' USING ERRCODE = 'TS002';
	END IF;
	RAISE EXCEPTION 'schedule: the claim is not current' USING ERRCODE = 'TS001';
END
$f$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS {{schema}}.sessions (
	id             text PRIMARY KEY,
	user_id        text NOT NULL,
	data           bytea NOT NULL,
	version        bigint NOT NULL,
	created_at     timestamptz NOT NULL,
	idle_until     timestamptz NOT NULL,
	absolute_until timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS sessions_user_idx ON {{schema}}.sessions (user_id, created_at);

CREATE TABLE IF NOT EXISTS {{schema}}.session_users (
	user_id    text PRIMARY KEY,
	generation bigint NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS {{schema}}.tenure_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (1, 'initial')
ON CONFLICT (version) DO NOTHING;
