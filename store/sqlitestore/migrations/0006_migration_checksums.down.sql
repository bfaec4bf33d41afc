-- tenure sqlitestore migration 6, down: drops the checksums of the
-- migrations. Only the record of which files built the tables goes; no
-- guarantee rests on it, so nothing guards this step.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Down
ALTER TABLE "{{prefix}}migrations" DROP COLUMN checksum;

DELETE FROM "{{prefix}}migrations" WHERE version = 6;
