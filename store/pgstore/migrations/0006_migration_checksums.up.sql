-- tenure pgstore migration 6: a checksum column on tenure_migrations, the
-- SHA-256 (hex) of each migration's up file as the tenure that ran
-- Migrate knew it. Migrate fills it for every recorded version that has
-- none; MigrationStatus (and `tenure migrate status`) reports a version
-- whose file this tenure knows with another text as drifted: the schema
-- was built from a file that was edited, or by another tool's copy of it.
-- Expand-only: a tenure of version 5 neither reads nor writes the column.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
ALTER TABLE {{schema}}.tenure_migrations ADD COLUMN IF NOT EXISTS checksum text;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (6, 'migration_checksums')
ON CONFLICT (version) DO NOTHING;
