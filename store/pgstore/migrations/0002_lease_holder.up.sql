-- tenure pgstore migration 2: a description of the holder kept with each
-- lease grant (leases.holder), and the time a lease ended kept in
-- expires_at after a release (it was NULL before), so that a lease row
-- free for longer than the fence retention can be swept. Rows released
-- before this migration count as free from the time it runs.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
ALTER TABLE {{schema}}.leases ADD COLUMN IF NOT EXISTS holder text;

UPDATE {{schema}}.leases SET expires_at = clock_timestamp() WHERE expires_at IS NULL;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (2, 'lease_holder')
ON CONFLICT (version) DO NOTHING;
