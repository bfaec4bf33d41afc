-- tenure sqlitestore migration 1, down: drops every table of tenure with
-- the prefix, and the version table. What the guards count is what
-- tenure's guarantees rest on: it is refused while any of them is there,
-- unless forced.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- tenure:guard lease rows (their fences)
-- tenure:guard-sql SELECT count(*) FROM "{{prefix}}leases"
-- tenure:guard fence guard rows (the highest fence each resource admitted)
-- tenure:guard-sql SELECT count(*) FROM "{{prefix}}fences"
-- tenure:guard idempotency records
-- tenure:guard-sql SELECT count(*) FROM "{{prefix}}idempotency"
-- tenure:guard ledger rows of completed schedule slots
-- tenure:guard-sql SELECT count(*) FROM "{{prefix}}schedule_ledger"

-- +goose Down
DROP TABLE IF EXISTS "{{prefix}}sessions";
DROP TABLE IF EXISTS "{{prefix}}schedule_ledger";
DROP TABLE IF EXISTS "{{prefix}}schedule_slots";
DROP TABLE IF EXISTS "{{prefix}}ratelimit";
DROP TABLE IF EXISTS "{{prefix}}idempotency";
DROP TABLE IF EXISTS "{{prefix}}fences";
DROP TABLE IF EXISTS "{{prefix}}leases";
DROP TABLE IF EXISTS "{{prefix}}migrations";
