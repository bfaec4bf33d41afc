-- tenure sqlitestore migration 6: a checksum column on the migrations
-- table, the SHA-256 (hex) of each migration's up file as the tenure that
-- ran Migrate knew it. Migrate fills it for every recorded version that
-- has none; MigrationStatus (and `tenure migrate status`) reports a
-- version whose file this tenure knows with another text as drifted: the
-- tables were built from a file that was edited, or by another tool's
-- copy of it. Expand-only: a tenure of version 5 neither reads nor writes
-- the column.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Up
ALTER TABLE "{{prefix}}migrations" ADD COLUMN checksum TEXT;

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (6, 'migration_checksums', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
