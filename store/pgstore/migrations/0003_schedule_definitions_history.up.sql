-- tenure pgstore migration 3: scheduled jobs keep each job's registered
-- definition (schedule_jobs: the fingerprint that may start slots, checked
-- when an attempt begins) and each slot's latest attempts
-- (schedule_attempts: a JSON array, at most 16 attempts, in the form of
-- schedule/driver.EncodeHistory).
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
CREATE TABLE IF NOT EXISTS {{schema}}.schedule_jobs (
	job           text PRIMARY KEY,
	fingerprint   text NOT NULL,
	spec          text NOT NULL,
	node          text NOT NULL,
	registered_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS {{schema}}.schedule_attempts (
	job     text NOT NULL,
	slot_id text NOT NULL,
	history jsonb NOT NULL,
	PRIMARY KEY (job, slot_id)
);

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (3, 'schedule_definitions_history')
ON CONFLICT (version) DO NOTHING;
