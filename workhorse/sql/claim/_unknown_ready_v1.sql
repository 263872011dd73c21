-- Whether `p_queue` holds a ready job of a task not in `p_tasks` (another app's: docs/design.md
-- "Errors", UnknownTaskError), or, with `p_expired`, an active one of such a task whose lease
-- ended before `p_now`. claim_v2 passes over those jobs, and reads its queue another way while
-- there are any.
-- One probe of jobs_ready_task_idx per gap between the declared tasks (before the first,
-- between two, after the last), each stopping at its first entry, so that no probe walks the
-- entries of a declared task: the head of a busy queue is mostly claimed jobs' entries not yet
-- vacuumed, and a skip scan from the queue's first entry read them all at every claim (0.85 ms
-- and 183 buffers at the head of a drained queue, issue #40).
-- Called by claim_v2 only, whose settings (no sequential or bitmap scans, generic plans) its
-- plans are made under.
CREATE FUNCTION workhorse._unknown_ready_v1(
    p_queue text, p_tasks text[], p_expired boolean, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- p_tasks, distinct and in order: the gaps to probe.
    v_tasks text[] := ARRAY(SELECT DISTINCT t.name FROM unnest(p_tasks) AS t(name)
                            WHERE t.name IS NOT NULL ORDER BY t.name);
BEGIN
    RETURN (CASE WHEN cardinality(v_tasks) = 0 THEN EXISTS (
                SELECT 1 FROM workhorse.jobs j WHERE j.queue = p_queue AND j.status = 'ready')
            ELSE EXISTS (
                SELECT 1 FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.status = 'ready' AND j.task < v_tasks[1])
            OR EXISTS (
                -- A lateral probe with LIMIT 1, not `AND EXISTS (...)`: a semi-join may be
                -- planned as one scan of the queue's ready range, materialized and filtered for
                -- each gap, when the statistics say the queue holds a row or two (193 ms and
                -- 270,000 rows at every claim of a 300,000-job backlog; each gap's probe reads
                -- three buffers). Statistics that old also make every partial index of ready
                -- jobs cost the same, and a probe may filter another one by task: the worker
                -- keeps them fresh (jobs_statistics_stale.sql).
                SELECT 1 FROM generate_subscripts(v_tasks, 1) AS g(i)
                CROSS JOIN LATERAL (
                    SELECT 1 FROM workhorse.jobs j
                    WHERE j.queue = p_queue AND j.status = 'ready'
                      AND j.task > v_tasks[g.i] AND j.task < v_tasks[g.i + 1]
                    LIMIT 1) AS probe
                WHERE g.i < cardinality(v_tasks))
            OR EXISTS (
                SELECT 1 FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.status = 'ready'
                  AND j.task > v_tasks[cardinality(v_tasks)])
            END)
        OR (p_expired AND EXISTS (
                SELECT 1 FROM workhorse.jobs j
                WHERE j.queue = p_queue AND j.status = 'active' AND j.lease_until <= p_now
                  AND NOT (j.task = ANY(p_tasks))));
END
$$;
