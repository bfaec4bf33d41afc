-- tenure pgstore migration 5: the fence floor of the leases
-- (lease_fence_floor), one row: the greatest fence of any lease row that
-- Sweep dropped. Sweep raises it to the fences of the rows it is about to
-- drop, in a transaction of its own, before it deletes them; every grant
-- reads it in its own statement and takes a fence above it as well as
-- above the key's last fence and the clock. So a lease row need not stay
-- once its lease ended: what the store keeps for ended leases is this one
-- row, whatever the number of keys. Grants and releases never write it.
-- The table stays logged whether or not the leases table is UNLOGGED.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
CREATE TABLE IF NOT EXISTS {{schema}}.lease_fence_floor (
	id    boolean PRIMARY KEY DEFAULT true CHECK (id),
	fence bigint NOT NULL
);

INSERT INTO {{schema}}.lease_fence_floor (id, fence) VALUES (true, 0)
ON CONFLICT (id) DO NOTHING;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (5, 'lease_fence_floor')
ON CONFLICT (version) DO NOTHING;
