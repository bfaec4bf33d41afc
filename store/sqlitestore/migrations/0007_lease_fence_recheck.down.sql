-- tenure sqlitestore migration 7, down: removes the record of version 7,
-- which changed nothing else.
-- {{prefix}} stands for the table name prefix ("tenure_" by default).

-- +goose Down
DELETE FROM "{{prefix}}migrations" WHERE version = 7;
