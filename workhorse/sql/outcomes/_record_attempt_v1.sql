-- The row trigger jobs_attempt_ended (migrations/0002_0.3.0.sql, "attempt history"): when an
-- attempt ends other than by a clean success, append it to the job's `attempt_history`
-- (docs/design.md "The dashboard in an incident"), keeping the last 20. An AFTER trigger, so that it costs the other updates nothing: a BEFORE row
-- trigger on jobs would make every UPDATE of a job (claim, heartbeat, complete) lock its row
-- first, one more WAL record each, whether or not its WHEN clause holds. Its WHEN clause fires it
-- only for an active job that leaves `active` for anything but `succeeded`, `ready` or
-- `suspended` (a suspension ends no attempt: its steps are its record), or whose
-- fence is replaced while it stays active, so a first-try success, a heartbeat, a cancel request
-- and a claim of a ready job never call it and write nothing more; when it fires, it writes the
-- entry with one more UPDATE of that row (that update does not fire it again: the row is no
-- longer leaving `active`). The function checks the same conditions itself.
--
-- Each entry is {"attempt", "started_at", "ended_at", "outcome", "error"}:
--  * `lost`: the fence was replaced under an expired lease (a claim took the job again), or
--    the job was ended by the sweep of an expired lease with no attempts left (its error says
--    LeaseExpired); ended_at is when the lease ran out;
--  * `snoozed`: back to `scheduled` with the attempt given back (snooze_v2);
--  * `retried`: a failure with attempts left, back to `scheduled` (fail_v2 with a retry time);
--  * `failed`: a failure that ends the job `failed` or `held`;
--  * `canceled`: the job ends `canceled` after its cancel was requested while it ran (its error
--    the failure it ended with, if any).
-- A succeeded attempt is not stored: it is the row itself (started_at, finished_at).
-- The function works with any version of the completion and claim functions: it reads only the
-- row before and after.
CREATE FUNCTION workhorse._record_attempt_v1() RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_outcome text;
    v_ended timestamptz := clock_timestamp();
    v_error jsonb;
BEGIN
    IF OLD.status IS DISTINCT FROM 'active'
       OR (NEW.status IN ('active', 'succeeded', 'ready', 'suspended') AND NEW.fence IS NOT DISTINCT FROM OLD.fence)
    THEN
        RETURN NULL;  -- not the end of an attempt (the WHEN clause lets none of these through)
    END IF;
    IF NEW.status = 'active' THEN
        -- Reclaimed under a new fence: the previous holder's lease had expired.
        v_outcome := 'lost';
        v_ended := LEAST(OLD.lease_until, v_ended);
        v_error := jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('lease expired on attempt %s of %s; the job was claimed again',
                              OLD.attempts, OLD.max_attempts),
            'traceback', NULL);
    ELSIF NEW.error IS DISTINCT FROM OLD.error AND NEW.error->>'type' = 'LeaseExpired'
          AND OLD.lease_until <= v_ended THEN
        v_outcome := 'lost';
        v_ended := LEAST(OLD.lease_until, v_ended);
        v_error := NEW.error;
    ELSIF NEW.status = 'scheduled' AND NEW.attempts < OLD.attempts THEN
        v_outcome := 'snoozed';
    ELSIF NEW.status = 'scheduled' THEN
        v_outcome := 'retried';
        v_error := NEW.error;
    ELSIF NEW.status IN ('failed', 'held') THEN
        v_outcome := 'failed';
        v_error := NEW.error;
    ELSIF NEW.status = 'canceled' THEN
        v_outcome := 'canceled';
        v_error := CASE WHEN NEW.error IS DISTINCT FROM OLD.error THEN NEW.error END;
    ELSIF NEW.status = 'expired' THEN
        -- Its lease ran out, and its start_by passed meanwhile (_expire_jobs_v1): lost.
        v_outcome := 'lost';
        v_ended := LEAST(OLD.lease_until, v_ended);
        v_error := NEW.error;
    ELSE
        RETURN NULL;  -- not an end of an attempt (another status some later version adds)
    END IF;
    UPDATE workhorse.jobs j
    SET attempt_history = COALESCE(
            (SELECT jsonb_agg(e.entry ORDER BY e.n)
             FROM jsonb_array_elements(j.attempt_history) WITH ORDINALITY AS e(entry, n)
             WHERE e.n > jsonb_array_length(j.attempt_history) - 19),
            '[]'::jsonb)
        || jsonb_build_array(jsonb_build_object(
            'attempt', OLD.attempts,
            'started_at', OLD.started_at,
            'ended_at', v_ended,
            'outcome', v_outcome,
            'error', v_error))
    WHERE j.id = NEW.id;
    RETURN NULL;
END
$$;
