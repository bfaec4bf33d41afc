-- The tables as Open created them before versions were recorded
-- (version 1 without a version table), for the upgrade test.

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
