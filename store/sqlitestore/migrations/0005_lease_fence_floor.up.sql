-- tenure sqlitestore migration 5: the fence floor (lease_fence_floor), one row
-- holding the greatest fence of every lease row the store has dropped.
-- Every new grant's fence is above it as well as above the key's own last
-- fence and the clock, so a lease row may go as soon as its lease ended:
-- what the store keeps for leases no longer grows with every key ever
-- locked. The floor starts at the greatest fence in the table, and the rows
-- of leases that have ended (and that no waiter is queued for) are dropped.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{prefix}}lease_fence_floor" (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	fence INTEGER NOT NULL
);

INSERT OR IGNORE INTO "{{prefix}}lease_fence_floor" (id, fence)
SELECT 1, coalesce(max(fence), 0) FROM "{{prefix}}leases";

UPDATE "{{prefix}}lease_fence_floor" SET fence = max(fence, (SELECT coalesce(max(fence), 0) FROM "{{prefix}}leases"))
WHERE id = 1;

DELETE FROM "{{prefix}}leases"
WHERE (token IS NULL OR expires_us IS NULL OR expires_us <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
	AND "key" NOT IN (SELECT "key" FROM "{{prefix}}lease_waiters");

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (5, 'lease_fence_floor', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
