-- Operator actions on jobs. Both wake claimers and keep per-key heads honest.

-- Release held (or failed, or canceled) jobs: ready now, with a fresh set of attempts.
CREATE FUNCTION workhorse.retry_jobs_v1(p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
    v_keys text[];
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS workhorse_released (id bigint, queue text, ckey text)
        ON COMMIT DELETE ROWS;
    DELETE FROM workhorse_released;
    WITH released AS (
        UPDATE workhorse.jobs j
        SET status = 'ready', attempts = 0, run_at = now(), finished_at = NULL,
            lease_until = NULL
        WHERE j.id = ANY(p_ids) AND j.status IN ('held', 'failed', 'canceled')
        RETURNING j.id, j.queue, j.ckey
    )
    INSERT INTO workhorse_released SELECT * FROM released;
    FOR v_queue, v_keys IN
        SELECT r.queue, array_agg(DISTINCT r.ckey) FROM workhorse_released r GROUP BY r.queue
    LOOP
        PERFORM workhorse._hint_keys(v_queue, v_keys);
        PERFORM pg_notify('workhorse_jobs', v_queue);
    END LOOP;
    RETURN QUERY SELECT r.id FROM workhorse_released r ORDER BY r.id;
END
$$;

-- Cancel jobs that have not finished. An active job's capacity frees at once; its handler's
-- heartbeat and result are then rejected by the fence check (status is no longer active).
CREATE FUNCTION workhorse.cancel_jobs_v1(p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE sql VOLATILE
AS $$
    WITH canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = clock_timestamp(), lease_until = NULL
        WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'active', 'held')
        RETURNING j.id, j.queue
    ), woken AS (
        SELECT count(pg_notify('workhorse_jobs', g.queue)) AS n
        FROM (SELECT DISTINCT c.queue FROM canceled c) AS g
    )
    SELECT canceled.id FROM canceled, woken ORDER BY canceled.id;
$$;
