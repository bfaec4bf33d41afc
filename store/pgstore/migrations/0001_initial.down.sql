-- tenure pgstore migration 1, down: drops every table and function of
-- tenure in the schema, and the version table. The schema itself stays
-- (it may hold other tables). What the guards count is what tenure's
-- guarantees rest on: it is refused while any of them is there, unless
-- forced.
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- tenure:guard lease rows (their fences)
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.leases
-- tenure:guard fence guard rows (the highest fence each resource admitted)
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.fences
-- tenure:guard idempotency records
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.idempotency
-- tenure:guard ledger rows of completed schedule slots
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.schedule_ledger
-- tenure:guard revocations of users' sessions
-- tenure:guard-sql SELECT count(*) FROM {{schema}}.session_users WHERE generation > 0

-- +goose Down
DROP TABLE IF EXISTS {{schema}}.session_users;
DROP TABLE IF EXISTS {{schema}}.sessions;
DROP FUNCTION IF EXISTS {{schema}}.schedule_refuse(text);
DROP TABLE IF EXISTS {{schema}}.schedule_ledger;
DROP TABLE IF EXISTS {{schema}}.schedule_slots;
DROP FUNCTION IF EXISTS {{schema}}.ratelimit_permit(text, text, text, int, bigint);
DROP TABLE IF EXISTS {{schema}}.ratelimit_permits;
DROP FUNCTION IF EXISTS {{schema}}.ratelimit_decide(text[], int[], bigint[], bigint[], bigint[], bigint[], boolean, boolean);
DROP FUNCTION IF EXISTS {{schema}}.ratelimit_eval(text, int, bigint, bigint, bigint, bigint, bigint, boolean);
DROP TABLE IF EXISTS {{schema}}.ratelimits;
DROP TABLE IF EXISTS {{schema}}.idempotency;
DROP TABLE IF EXISTS {{schema}}.fences;
DROP TABLE IF EXISTS {{schema}}.leases;
DROP TABLE IF EXISTS {{schema}}.tenure_migrations;
