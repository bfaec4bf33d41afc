-- tenure pgstore migration 6, down: drops the checksums of the migrations.
-- Only the record of which files built the schema goes; no guarantee
-- rests on it, so nothing guards this step.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
ALTER TABLE {{schema}}.tenure_migrations DROP COLUMN IF EXISTS checksum;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 6;
