-- tenure pgstore migration 5, down: drops the fence floor of the leases.
-- The code of version 4 grants a key whose row Sweep dropped a fence from
-- the clock (µs) alone, so the floor may go only while it is below the
-- clock: a floor ahead of it holds fences that a new grant would go below.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- tenure:guard fence floor ahead of the clock (fences of swept leases a new grant would go below)
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.lease_fence_floor WHERE fence >= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint

-- +goose Down
DROP TABLE IF EXISTS {{schema}}.lease_fence_floor;

DELETE FROM {{schema}}.tenure_migrations WHERE version = 5;
