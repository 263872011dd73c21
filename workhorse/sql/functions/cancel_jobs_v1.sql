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
    PERFORM workhorse._after_operator_change_v1(v_queues, v_keys);
    RETURN QUERY SELECT unnest(COALESCE(v_ids, '{}'));
END
$$;
