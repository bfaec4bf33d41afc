-- tenure sqlitestore migration 6: a checksum column on the migrations
-- table, the SHA-256 (hex) of the statements of each migration's up file
-- as the tenure whose Migrate applied it knew them (NULL: applied
-- otherwise). MigrationStatus (and `tenure migrate status`) reports a
-- version whose recorded checksum differs from this tenure's file as
-- drifted: the tables were built from a file that was edited.
-- Expand-only: a tenure of version 5 neither reads nor writes the column.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Up
ALTER TABLE "{{prefix}}migrations" ADD COLUMN checksum TEXT;

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (6, 'migration_checksums', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
