-- tenure pgstore migration 7: every lease row a grant inserts is checked,
-- once inserted, against the fence floor as committed by then.
-- A grant reads the floor with the rest of its statement, at the
-- statement's start. Sweep raises the floor, then deletes the rows at or
-- below it. A grant that started before the raise committed and reached
-- its key only after the row was deleted (it waited for the delete, or
-- ran just after it) would insert a new row with a fence from the floor
-- it read, which may be at or below the fence of the row deleted. The
-- trigger reads the floor again after the insert (a fresh snapshot: the
-- function is VOLATILE), and such a grant fails with serialization_failure
-- (40001) instead; the Store grants again in a new statement, which reads
-- the raised floor. Only inserts are checked: a grant that takes over an
-- existing row follows that row's fence, and a row inserted with no
-- token (no lease: one restored, or written by hand) is not a grant.
-- Grants still never write the
-- floor, so grants of different keys never wait for each other.
-- Expand-only: a tenure of version 6 runs on it (its grant fails in that
-- rare race instead of granting a fence twice).
-- {{schema}} stands for the quoted schema name ("tenure" by default).

-- +goose Up
CREATE OR REPLACE FUNCTION {{schema}}.lease_fence_above_floor() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	IF NEW.token IS NOT NULL AND NEW.fence <= (SELECT ff.fence FROM {{schema}}.lease_fence_floor AS ff) THEN
		RAISE EXCEPTION 'tenure: the lease fence floor was raised while this grant ran; grant again'
			USING ERRCODE = 'serialization_failure';
	END IF;
	RETURN NULL;
END
$fn$;

DO $do$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgname = 'lease_fence_above_floor' AND tgrelid = '{{schema}}.leases'::regclass) THEN
		CREATE TRIGGER lease_fence_above_floor AFTER INSERT ON {{schema}}.leases
			FOR EACH ROW EXECUTE FUNCTION {{schema}}.lease_fence_above_floor();
	END IF;
END
$do$;

INSERT INTO {{schema}}.tenure_migrations (version, name) VALUES (7, 'lease_fence_recheck')
ON CONFLICT (version) DO NOTHING;
