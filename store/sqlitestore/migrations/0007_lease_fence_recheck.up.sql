-- tenure sqlitestore migration 7: records the version only. On PostgreSQL
-- this version checks every inserted lease row against the fence floor as
-- committed once the row is in, because a grant there reads the floor at
-- its statement's start while a sweep may raise it and delete the key's
-- row before the grant writes. SQLite has one writer at a time: a grant
-- reads the floor and writes its row under the same write lock that a
-- sweep's raise and delete need, so no sweep runs in between and there is
-- nothing to add. The SQL schemas of both stores keep the same versions.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Up
INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (7, 'lease_fence_recheck', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
