-- cancel_jobs_v1, and a waiting workflow member becomes `canceled` at once too (its dependents
-- with it, through the workflow trigger), its expiry fixed from `p_retention` as cancel_jobs_v1
-- fixes the others' (its dependents' from their own tasks' retention, in the trigger). Returns
-- the ids canceled or asked to cancel.
CREATE FUNCTION workhorse.cancel_jobs_v2(p_ids bigint[], p_retention text)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_at timestamptz := clock_timestamp();
BEGIN
    WITH locked AS (
        SELECT j.id FROM workhorse.jobs j
        WHERE j.id = ANY(p_ids) AND j.status = 'waiting'
        ORDER BY j.queue, j.id
        FOR UPDATE
    ), canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at,
            expires_at = workhorse._expiry_v1('canceled', p_retention::jsonb, v_at)
        WHERE j.id IN (SELECT id FROM locked) AND j.status = 'waiting'
        RETURNING j.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM canceled;
    PERFORM workhorse._ended_v1(v_ids);
    RETURN QUERY SELECT u.id FROM (
        SELECT unnest(COALESCE(v_ids, '{}')) AS id
        UNION
        SELECT c FROM workhorse.cancel_jobs_v1(p_ids, p_retention) AS c) AS u
    ORDER BY u.id;
END
$$;
