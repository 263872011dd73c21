-- Cancel jobs that have not finished. A scheduled, ready or held job becomes `canceled` at once.
-- An active one gets a cancel request and stays active, its capacity held, until its handler
-- has really stopped: the worker learns of the request with its next heartbeat (an async
-- handler is cancelled; a sync one sees `cancel_requested`), and the job ends `canceled` when
-- its outcome is recorded. `p_retention` (JSON: status -> seconds kept) fixes the expiry of the
-- jobs canceled here. Returns the ids canceled or asked to cancel.
CREATE FUNCTION workhorse.cancel_jobs_v1(p_ids bigint[], p_retention text)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_requested bigint[];
    v_queues text[];
    v_keys text[];
    v_at timestamptz := clock_timestamp();
BEGIN
    WITH canceled AS (
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at, lease_until = NULL,
            expires_at = workhorse._expiry_v1('canceled', p_retention::jsonb, v_at)
        WHERE j.id = ANY(p_ids) AND j.status IN ('scheduled', 'ready', 'held')
        RETURNING j.id, j.queue, j.ckey
    )
    SELECT array_agg(id ORDER BY id), array_agg(queue), array_agg(ckey)
    INTO v_ids, v_queues, v_keys
    FROM canceled;
    WITH requested AS (
        UPDATE workhorse.jobs j
        SET cancel_requested_at = COALESCE(j.cancel_requested_at, clock_timestamp())
        WHERE j.id = ANY(p_ids) AND j.status = 'active'
        RETURNING j.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_requested FROM requested;
    PERFORM workhorse._after_operator_change_v1(v_queues, v_keys);
    PERFORM workhorse._ended_v1(v_ids);
    RETURN QUERY SELECT u.id FROM unnest(COALESCE(v_ids, '{}') || COALESCE(v_requested, '{}'))
                 AS u(id) ORDER BY u.id;
END
$$;
