-- tenure pgstore migration 8: a waiter's place may carry what a release
-- needs to hand the key straight to it (lease/driver.Handover): the
-- waiter's token and holder, the end of the lease it would be granted
-- (its TTL from the attempt that wrote the place) and that attempt's
-- number, and the session that listens for the waiter's wake-ups (the
-- key of the advisory lock that session holds while it is connected). A
-- release that finds such a waiter first, and that session still
-- connected, grants the key to the waiter in its own statement and wakes
-- it with the grant; otherwise it frees the key and wakes the waiter,
-- as before. A place written without them (a waiter that is not
-- listening, or the code of version 7) is never handed a key. The table
-- stays UNLOGGED: a place lost in a crash or a failover is taken again,
-- without the hand-over, by the waiter's next attempt.
-- Expand-only: a tenure of version 7 runs on it, and hands nothing over.
-- SQLite's version 8 records the version only.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
ALTER TABLE {{schema}}.lease_waiters
	ADD COLUMN IF NOT EXISTS token text,
	ADD COLUMN IF NOT EXISTS holder text,
	ADD COLUMN IF NOT EXISTS grant_until timestamptz,
	ADD COLUMN IF NOT EXISTS attempt bigint,
	ADD COLUMN IF NOT EXISTS listener integer;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (8, 'lease_handover')
ON CONFLICT (version) DO NOTHING;
