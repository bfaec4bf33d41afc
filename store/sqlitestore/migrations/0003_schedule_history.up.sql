-- tenure sqlitestore migration 3: each slot's latest attempts
-- (schedule_attempts, schedule/driver.EncodeHistory's JSON) and each job's
-- registered definition (schedule_jobs).
-- {{prefix}} stands for the table prefix ("tenure_" by default).

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{prefix}}schedule_attempts" (
	job TEXT NOT NULL,
	slot_id TEXT NOT NULL,
	history TEXT NOT NULL,
	PRIMARY KEY (job, slot_id)
);

CREATE TABLE IF NOT EXISTS "{{prefix}}schedule_jobs" (
	job TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	spec TEXT NOT NULL,
	node TEXT NOT NULL,
	registered_us INTEGER NOT NULL
);

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (3, 'schedule_history', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
