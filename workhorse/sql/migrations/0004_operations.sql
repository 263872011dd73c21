-- Operator actions on jobs. Both wake claimers and keep per-key heads honest: a released job may
-- become its key's new head, and a canceled ready job may have been its key's head.

CREATE FUNCTION workhorse._after_operator_change(p_queues text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_keys text[];
BEGIN
    FOR v_queue, v_keys IN
        SELECT c.queue, array_agg(DISTINCT c.ckey)
        FROM unnest(p_queues, p_keys) AS c(queue, ckey)
        GROUP BY c.queue
    LOOP
        PERFORM workhorse._hint_keys(v_queue, v_keys);
        PERFORM pg_notify('workhorse_jobs', v_queue);
    END LOOP;
END
$$;

-- Release held (or failed, or canceled) jobs: ready now, with a fresh set of attempts.
CREATE FUNCTION workhorse.retry_jobs_v1(p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_queues text[];
    v_keys text[];
BEGIN
    WITH released AS (
        UPDATE workhorse.jobs j
        SET status = 'ready', attempts = 0, run_at = now(), finished_at = NULL,
            lease_until = NULL
        WHERE j.id = ANY(p_ids) AND j.status IN ('held', 'failed', 'canceled')
        RETURNING j.id, j.queue, j.ckey
    )
    SELECT array_agg(id ORDER BY id), array_agg(queue), array_agg(ckey)
    INTO v_ids, v_queues, v_keys
    FROM released;
    PERFORM workhorse._after_operator_change(v_queues, v_keys);
    RETURN QUERY SELECT unnest(COALESCE(v_ids, '{}'));
END
$$;

-- Cancel jobs that have not finished. An active job's capacity frees at once; its handler's
-- heartbeat and result are then rejected by the fence check (status is no longer active).
CREATE FUNCTION workhorse.cancel_jobs_v1(p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_queues text[];
    v_keys text[];
BEGIN
    WITH canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = clock_timestamp(), lease_until = NULL
        WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'active', 'held')
        RETURNING j.id, j.queue, j.ckey
    )
    SELECT array_agg(id ORDER BY id), array_agg(queue), array_agg(ckey)
    INTO v_ids, v_queues, v_keys
    FROM canceled;
    PERFORM workhorse._after_operator_change(v_queues, v_keys);
    RETURN QUERY SELECT unnest(COALESCE(v_ids, '{}'));
END
$$;
