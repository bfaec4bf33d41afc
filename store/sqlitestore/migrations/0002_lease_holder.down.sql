-- tenure sqlitestore migration 2, down: drops the holder descriptions and
-- marks released leases free as version 1 did (expires_us NULL). Fences
-- stay in the rows.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Down
UPDATE "{{prefix}}leases" SET expires_us = NULL WHERE token IS NULL;

ALTER TABLE "{{prefix}}leases" DROP COLUMN holder;

DELETE FROM "{{prefix}}migrations" WHERE version = 2;
