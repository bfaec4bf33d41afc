-- tenure pgstore migration 3, down: drops the registered job definitions
-- and the slots' attempt history. The ledger (schedule_ledger), which
-- keeps a completed slot from running again, stays.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
DROP TABLE IF EXISTS {{schema}}.schedule_attempts;

DROP TABLE IF EXISTS {{schema}}.schedule_jobs;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 3;
