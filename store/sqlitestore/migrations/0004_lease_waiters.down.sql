-- tenure sqlitestore migration 4, down: drops the queue of a contended
-- lease's waiters. No guarantee rests on it: a waiter's place is taken
-- again by its next attempt, and the code of version 3 serves waiters in
-- no order.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Down
DROP INDEX IF EXISTS "{{prefix}}lease_waiters_order";

DROP TABLE IF EXISTS "{{prefix}}lease_waiters";

DELETE FROM "{{prefix}}migrations" WHERE version = 4;
