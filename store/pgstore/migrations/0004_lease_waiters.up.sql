-- tenure pgstore migration 4: the queue of a contended lease's waiters
-- (lease_waiters), so that a key that becomes free goes to the waiter that
-- came first. A row is a waiter's place: the waiter (lease/driver.WaiterID
-- of its token, never the token), its arrival order (seq) and the end of
-- its stay, which every attempt of the waiter extends. The table is
-- UNLOGGED: a place lost in a crash or a failover is taken again by the
-- waiter's next attempt, and no guarantee rests on it. leases.waiters is a
-- hint that the key may have a queue: set by the first waiter that queues,
-- cleared when a release finds the queue empty, so that the
-- acquire and the release of a key nobody waits for never read the queue.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
CREATE SEQUENCE IF NOT EXISTS {{schema}}.lease_waiters_seq;

CREATE UNLOGGED TABLE IF NOT EXISTS {{schema}}.lease_waiters (
	key        text NOT NULL,
	waiter     text NOT NULL,
	seq        bigint NOT NULL,
	stay_until timestamptz NOT NULL,
	PRIMARY KEY (key, waiter)
);

CREATE INDEX IF NOT EXISTS lease_waiters_order ON {{schema}}.lease_waiters (key, seq);

ALTER TABLE {{schema}}.leases ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (4, 'lease_waiters')
ON CONFLICT (version) DO NOTHING;
