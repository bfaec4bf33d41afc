-- tenure sqlitestore migration 8: records the version only. On PostgreSQL
-- this version lets a waiter's place carry what a release needs to hand
-- the key straight to it, because there the waiters are in other
-- processes, woken by NOTIFY, and the woken waiter's own grant is a second
-- committed write. The waiters of one SQLite file are woken in the
-- process, and a grant writes under the file's one write lock, so nothing
-- is added. The SQL schemas of both stores keep the same versions.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Up
INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (8, 'lease_handover', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
