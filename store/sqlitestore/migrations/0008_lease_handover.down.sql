-- tenure sqlitestore migration 8, down: removes the record of version 8,
-- which changed nothing else.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Down
DELETE FROM "{{prefix}}migrations" WHERE version = 8;
