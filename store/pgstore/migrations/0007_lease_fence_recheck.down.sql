-- tenure pgstore migration 7, down: drops the check of inserted lease rows
-- against the fence floor. The code of version 6 does not retry a grant
-- the check refused, and runs without it as it did before.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Down
DROP TRIGGER IF EXISTS lease_fence_above_floor ON {{schema}}.leases;

DROP FUNCTION IF EXISTS {{schema}}.lease_fence_above_floor();

DELETE FROM {{schema}}.tenure_migrations WHERE version = 7;
