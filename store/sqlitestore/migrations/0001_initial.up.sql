-- tenure sqlitestore migration 1: the tables of leases, fence guards,
-- idempotency records, rate limits, sessions and schedules, and the
-- version table. {{prefix}} stands for the table prefix ("tenure_" by
-- default); `tenure migrate sql --table-prefix PREFIX` prints this file resolved.
-- Every statement creates only what is missing, so the file also adopts
-- tables created by tenure before versions were recorded.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{prefix}}leases" (
	"key" TEXT PRIMARY KEY,
	token TEXT,
	fence INTEGER NOT NULL,
	expires_us INTEGER
);

CREATE TABLE IF NOT EXISTS "{{prefix}}fences" (
	resource TEXT PRIMARY KEY,
	fence INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS "{{prefix}}idempotency" (
	scope TEXT NOT NULL,
	"key" TEXT NOT NULL,
	fingerprint TEXT NOT NULL,
	token TEXT,
	fence INTEGER NOT NULL,
	state INTEGER NOT NULL,
	claim_us INTEGER,
	expires_us INTEGER NOT NULL,
	failed INTEGER NOT NULL DEFAULT 0,
	message TEXT,
	value BLOB,
	PRIMARY KEY (scope, "key")
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{{prefix}}idempotency_expires" ON "{{prefix}}idempotency" (expires_us);

CREATE TABLE IF NOT EXISTS "{{prefix}}ratelimit" (
	"key" TEXT PRIMARY KEY,
	state BLOB NOT NULL,
	expires_us INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{{prefix}}ratelimit_expires" ON "{{prefix}}ratelimit" (expires_us);

CREATE TABLE IF NOT EXISTS "{{prefix}}schedule_slots" (
	job TEXT NOT NULL,
	slot_id TEXT NOT NULL,
	slot_us INTEGER NOT NULL,
	state TEXT NOT NULL,
	node TEXT NOT NULL,
	attempts INTEGER NOT NULL,
	fence INTEGER NOT NULL,
	started_us INTEGER,
	finished_us INTEGER,
	error TEXT NOT NULL,
	retry_us INTEGER,
	PRIMARY KEY (job, slot_id)
);

CREATE INDEX IF NOT EXISTS "{{prefix}}schedule_slots_time" ON "{{prefix}}schedule_slots" (job, slot_us);

CREATE TABLE IF NOT EXISTS "{{prefix}}schedule_ledger" (
	job TEXT NOT NULL,
	slot_id TEXT NOT NULL,
	fence INTEGER NOT NULL,
	completed_us INTEGER NOT NULL,
	PRIMARY KEY (job, slot_id)
);

CREATE TABLE IF NOT EXISTS "{{prefix}}sessions" (
	id TEXT PRIMARY KEY,
	user_id TEXT NOT NULL,
	data BLOB NOT NULL,
	version INTEGER NOT NULL,
	created_us INTEGER NOT NULL,
	idle_us INTEGER NOT NULL,
	absolute_us INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{{prefix}}sessions_user" ON "{{prefix}}sessions" (user_id, created_us);

CREATE TABLE IF NOT EXISTS "{{prefix}}migrations" (
	version INTEGER PRIMARY KEY,
	name TEXT NOT NULL,
	applied_us INTEGER NOT NULL
);

INSERT OR IGNORE INTO "{{prefix}}migrations" (version, name, applied_us)
VALUES (1, 'initial', CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));
