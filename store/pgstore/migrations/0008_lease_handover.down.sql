-- tenure pgstore migration 8, down: drops what a waiter's place carries
-- for a hand-over. No guarantee rests on it: the code of version 7 frees
-- a released key and wakes the first waiter, which takes it itself.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
ALTER TABLE {{schema}}.lease_waiters
	DROP COLUMN IF EXISTS token,
	DROP COLUMN IF EXISTS holder,
	DROP COLUMN IF EXISTS grant_until,
	DROP COLUMN IF EXISTS attempt,
	DROP COLUMN IF EXISTS listener;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 8;
