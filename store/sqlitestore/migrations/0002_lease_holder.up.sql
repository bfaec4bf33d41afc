-- tenure sqlitestore migration 2: a description of the holder kept with
-- each lease grant (holder), and the time a lease ended kept in expires_us
-- after a release (it was NULL before), so that a lease row free for
-- longer than the fence retention can be swept. Rows released before this
-- migration count as free from the time it runs.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Up
ALTER TABLE "{{prefix}}leases" ADD COLUMN holder TEXT;

UPDATE "{{prefix}}leases" SET expires_us = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE expires_us IS NULL;

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (2, 'lease_holder', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
