-- tenure sqlitestore migration 5, down: drops the fence floor. The code of
-- version 4 grants a key whose row is gone a fence from the clock (µs)
-- alone, so the floor may go only while it is below the clock: a floor
-- ahead of it holds fences that a new grant would go below.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- tenure:guard fence floor ahead of the clock (fences of swept leases a new grant would go below)
-- tenure:guard-sql SELECT count(*) FROM "{{prefix}}lease_fence_floor" WHERE fence >= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)

-- +goose Down
DROP TABLE IF EXISTS "{{prefix}}lease_fence_floor";

DELETE FROM "{{prefix}}migrations" WHERE version = 5;
