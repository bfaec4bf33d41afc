-- tenure sqlitestore migration 4: the queue of a contended lease's waiters
-- (lease_waiters), so that a key that becomes free goes to the waiter that
-- came first. A row is a waiter's place: the waiter (lease/driver.WaiterID
-- of its token, never the token), its arrival order within the key (seq)
-- and the end of its stay (µs), which every attempt of the waiter extends.
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{prefix}}lease_waiters" (
	"key" TEXT NOT NULL,
	waiter TEXT NOT NULL,
	seq INTEGER NOT NULL,
	stay_until_us INTEGER NOT NULL,
	PRIMARY KEY ("key", waiter)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{{prefix}}lease_waiters_order" ON "{{prefix}}lease_waiters" ("key", seq);

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (4, 'lease_waiters', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
