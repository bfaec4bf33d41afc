-- tenure sqlitestore migration 3, down: drops the slots' attempt history
-- and the registered job definitions. The ledger (schedule_ledger), which
-- keeps a completed slot from running again, stays.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Down
DROP TABLE IF EXISTS "{{prefix}}schedule_attempts";

DROP TABLE IF EXISTS "{{prefix}}schedule_jobs";

DELETE FROM "{{prefix}}migrations" WHERE version = 3;
