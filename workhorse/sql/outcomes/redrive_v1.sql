-- Redrive dead letters (docs/design.md "Dead letters"): new attempts of the same jobs, each
-- queue's in its admission order, released no faster than a rate: `p_rate_n` per
-- `p_rate_period` seconds when given, else the queue's own rate limit in force, else all at
-- once. The i-th job of a queue (from 0) is released at now + i * period / n: ready at once for
-- the first, `scheduled` until its time for the rest, so the claims (whose limits and rate
-- limits still decide every start) see them arrive at the pace, not as a stampede.
--
-- Each job gets a fresh set of attempts (as a retry), `redriven_at`, `redrive_count` + 1, and
-- an attempt_history entry of outcome "redriven" (its `redrive`: the status it left, who, why
-- and the audit row), kept among the last 20. One audit_log row says who redrove what, with
-- the filters and the ids. With `p_dry_run`, nothing is written and no lock taken: the rows are
-- those the real run would touch now, with their release times. Returns (job id, queue, release
-- time, audit id) in release order per queue.
CREATE FUNCTION workhorse.redrive_v1(
    p_queue text, p_task text, p_tag text, p_error_type text, p_since timestamptz,
    p_ids bigint[], p_rate_n integer, p_rate_period double precision, p_dry_run boolean,
    p_os_user text, p_reason text, p_filters jsonb)
RETURNS TABLE (job_id bigint, job_queue text, release_at timestamptz, audit_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_audit bigint;
    v_ids bigint[];
    v_queues text[];
    v_keys text[];
    v_releases timestamptz[];
BEGIN
    IF NOT p_dry_run THEN
        -- The targets locked first, in (queue, id) order as every operator change takes them,
        -- so that a concurrent redrive or retry of the same jobs waits and then finds them gone
        -- (the selection below is a new statement: it sees what that one committed).
        PERFORM 1 FROM workhorse.jobs j
        WHERE j.id IN (SELECT d.id FROM workhorse._dead_jobs_v1(
                           p_queue, p_task, p_tag, p_error_type, p_since, p_ids) AS d)
        ORDER BY j.queue, j.id
        FOR UPDATE;
    END IF;
    -- Each queue's spacing read once (its limits in force), each job numbered in its queue.
    WITH dead AS MATERIALIZED (
        SELECT d.id, d.queue, d.ckey,
               row_number() OVER (PARTITION BY d.queue ORDER BY d.rank, d.id) AS nth
        FROM workhorse._dead_jobs_v1(p_queue, p_task, p_tag, p_error_type, p_since, p_ids) AS d
    ), spacing AS (
        SELECT q.queue,
               COALESCE(p_rate_period / p_rate_n, lim.rate_period / lim.rate_limit, 0) AS secs
        FROM (SELECT DISTINCT dead.queue FROM dead) AS q
        CROSS JOIN LATERAL workhorse._limits_v1(q.queue, v_now) AS lim
    )
    SELECT array_agg(c.id ORDER BY c.queue, c.nth), array_agg(c.queue ORDER BY c.queue, c.nth),
           array_agg(c.ckey ORDER BY c.queue, c.nth),
           array_agg(v_now + make_interval(secs => (c.nth - 1) * s.secs)
                     ORDER BY c.queue, c.nth)
    INTO v_ids, v_queues, v_keys, v_releases
    FROM dead AS c
    JOIN spacing AS s ON s.queue = c.queue;

    IF NOT p_dry_run AND v_ids IS NOT NULL THEN
        INSERT INTO workhorse.audit_log (action, os_user, application_name, filters, job_count,
                                         job_ids, reason)
        VALUES ('redrive', p_os_user, current_setting('application_name'), p_filters,
                cardinality(v_ids), v_ids, p_reason)
        RETURNING id INTO v_audit;

        UPDATE workhorse.jobs j
        SET status = CASE WHEN r.release_at <= v_now THEN 'ready' ELSE 'scheduled' END,
            run_at = r.release_at, attempts = 0, finished_at = NULL, lease_until = NULL,
            expires_at = NULL, cancel_requested_at = NULL,
            redriven_at = v_now, redrive_count = j.redrive_count + 1,
            attempt_history = (
                SELECT jsonb_agg(kept.entry ORDER BY kept.n)
                FROM (SELECT a.entry, a.n
                      FROM jsonb_array_elements(
                               COALESCE(j.attempt_history, '[]'::jsonb)
                               || jsonb_build_array(jsonb_build_object(
                                   'attempt', j.attempts, 'started_at', v_now,
                                   'ended_at', v_now, 'outcome', 'redriven', 'error', NULL,
                                   'redrive', jsonb_build_object(
                                       'from', j.status, 'by', p_os_user,
                                       'application_name', current_setting('application_name'),
                                       'reason', p_reason, 'audit_id', v_audit))))
                           WITH ORDINALITY AS a(entry, n)
                      ORDER BY a.n DESC
                      LIMIT 20) AS kept)
        FROM unnest(v_ids, v_releases) AS r(id, release_at)
        WHERE j.id = r.id AND j.status IN ('failed', 'held');

        PERFORM workhorse._after_operator_change_v2(v_queues, v_keys);
    END IF;

    RETURN QUERY
    SELECT r.id, r.queue, r.release_at, v_audit
    FROM unnest(v_ids, v_queues, v_releases) WITH ORDINALITY AS r(id, queue, release_at, n)
    ORDER BY r.n;
END
$$;
