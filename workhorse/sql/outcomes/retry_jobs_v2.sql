-- Release held (or failed, or canceled) jobs: ready now, with a fresh set of attempts.
CREATE FUNCTION workhorse.retry_jobs_v2(p_ids bigint[])
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
            lease_until = NULL, expires_at = NULL, cancel_requested_at = NULL
        WHERE j.id = ANY(p_ids) AND j.status IN ('held', 'failed', 'canceled')
        RETURNING j.id, j.queue, j.ckey
    )
    SELECT array_agg(id ORDER BY id), array_agg(queue), array_agg(ckey)
    INTO v_ids, v_queues, v_keys
    FROM released;
    PERFORM workhorse._after_operator_change_v2(v_queues, v_keys);
    RETURN QUERY SELECT unnest(COALESCE(v_ids, '{}'));
END
$$;
