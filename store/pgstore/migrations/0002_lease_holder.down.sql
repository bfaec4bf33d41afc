-- tenure pgstore migration 2, down: drops the holder descriptions and
-- marks released leases free as version 1 did (expires_at NULL). Fences
-- stay in the rows.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
UPDATE {{schema}}.leases SET expires_at = NULL WHERE token IS NULL;

ALTER TABLE {{schema}}.leases DROP COLUMN IF EXISTS holder;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 2;
