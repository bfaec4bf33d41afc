-- tenure pgstore migration 4, down: drops the queue of a contended lease's
-- waiters. No guarantee rests on it: a waiter's place is taken again by its
-- next attempt, and the code of version 3 serves waiters in no order.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
ALTER TABLE {{schema}}.leases DROP COLUMN IF EXISTS waiters;

DROP TABLE IF EXISTS {{schema}}.lease_waiters;

DROP SEQUENCE IF EXISTS {{schema}}.lease_waiters_seq;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 4;
