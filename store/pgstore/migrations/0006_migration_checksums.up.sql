-- tenure pgstore migration 6: a checksum column on tenure_migrations, the
-- SHA-256 (hex) of the statements of each migration's up file as the
-- tenure whose Migrate applied it knew them (NULL: applied otherwise).
-- MigrationStatus (and `tenure migrate status`) reports a version whose
-- recorded checksum differs from this tenure's file as drifted: the schema
-- was built from a file that was edited.
-- Expand-only: a tenure of version 5 neither reads nor writes the column.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
ALTER TABLE {{schema}}.tenure_migrations ADD COLUMN IF NOT EXISTS checksum text;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (6, 'migration_checksums')
ON CONFLICT (version) DO NOTHING;
