-- Fire schedule occurrences: (p_run_ids[i], p_run_occurrences[i]) is one occurrence to enqueue,
-- (p_ids[j], p_next_run_ats[j]) a schedule's new pointer. The caller (a supervisor's firing
-- pass) chose them from the schedule rows it locked and PostgreSQL's now().
--
-- The primary key of schedule_runs decides what is enqueued: an occurrence already fired (by
-- another supervisor, or an earlier pass) inserts no row, so it gets no job; a concurrent pass
-- inserting the same occurrence waits for this transaction and then inserts nothing. Each job's
-- run_at and scheduled_for are its occurrence, and its cost, rate_cost and weight the
-- schedule's (docs/design.md "Fair share and job cost": resolved when the schedule was declared, stored
-- by sync_schedules_v2), set in the same UPDATE as scheduled_for, so they cost no extra row
-- version. A cost or rate cost other than 1 raises the queue's feature level to 2 as enqueue_v2
-- does, in this transaction, so no claim of level 1 sees the job. The cost is not checked
-- against the policy here (the sync refused a cost the policy then could never fit; one that a
-- later sync made unfit is held by the claim with CostExceedsLimitError), so a firing pass never
-- fails on one schedule and stalls the others. Returns the occurrences fired, with their jobs.
CREATE FUNCTION workhorse.fire_schedules_v2(
    p_run_ids bigint[],
    p_run_occurrences timestamptz[],
    p_ids bigint[],
    p_next_run_ats timestamptz[]
) RETURNS TABLE (schedule_id bigint, occurrence timestamptz, job_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_occurrences timestamptz[];
    v_jobs bigint[];
    v_tasks text[];
    v_queues text[];
    v_ckeys text[];
    v_priorities smallint[];
    v_payloads text[];
    v_max_attempts integer[];
    v_on_failures text[];
    v_metas text[];
    v_tags text[];  -- each occurrence's job's tags, its schedule's, as JSON
BEGIN
    WITH claimed AS (
        INSERT INTO workhorse.schedule_runs AS r (schedule_id, occurrence)
        SELECT u.id, u.occurrence
        FROM unnest(p_run_ids, p_run_occurrences) AS u(id, occurrence)
        ORDER BY u.occurrence, u.id
        ON CONFLICT DO NOTHING
        RETURNING r.schedule_id, r.occurrence
    )
    SELECT array_agg(c.schedule_id ORDER BY c.occurrence, c.schedule_id),
           array_agg(c.occurrence ORDER BY c.occurrence, c.schedule_id)
    INTO v_ids, v_occurrences
    FROM claimed c;

    IF v_ids IS NOT NULL THEN
        SELECT array_agg(s.task ORDER BY u.ord), array_agg(s.queue ORDER BY u.ord),
               array_agg(s.ckey ORDER BY u.ord), array_agg(s.priority ORDER BY u.ord),
               array_agg(jsonb_build_object('args', s.args, 'kwargs', s.kwargs)::text
                         ORDER BY u.ord),
               array_agg(s.max_attempts ORDER BY u.ord), array_agg(s.on_failure ORDER BY u.ord),
               array_agg(jsonb_build_object('schedule', s.name)::text ORDER BY u.ord),
               array_agg(to_jsonb(s.tags)::text ORDER BY u.ord)
        INTO v_tasks, v_queues, v_ckeys, v_priorities, v_payloads, v_max_attempts,
             v_on_failures, v_metas, v_tags
        FROM unnest(v_ids) WITH ORDINALITY AS u(id, ord)
        JOIN workhorse.schedules s ON s.id = u.id;

        -- The ordinary enqueue (its gates, key hints, on_key_full and wake-ups), at the
        -- occurrence, with no key of its own and cost 1 (the schedule's units are set below, so
        -- that no cost is refused here).
        SELECT array_agg(e.id ORDER BY e.ord) INTO v_jobs
        FROM workhorse.enqueue_v2(
            v_tasks, v_queues, v_ckeys, v_priorities, v_payloads, v_occurrences,
            array_fill(NULL::double precision, ARRAY[cardinality(v_ids)]), v_max_attempts,
            v_on_failures, v_metas, NULL::text[], p_tags => v_tags)
             WITH ORDINALITY AS e(id, duplicate, ord);

        -- Before the jobs are visible to any claim (this transaction): the queue's level.
        INSERT INTO workhorse.queue_levels AS lv (queue, feature_level)
        SELECT s.queue, 2
        FROM workhorse.schedules s
        WHERE s.id = ANY(v_ids) AND (s.cost <> 1 OR s.rate_cost <> 1)
        GROUP BY s.queue
        ORDER BY s.queue
        ON CONFLICT (queue) DO UPDATE SET feature_level = 2
        WHERE lv.feature_level < 2;

        UPDATE workhorse.jobs j
        SET scheduled_for = u.occurrence, cost = s.cost, rate_cost = s.rate_cost,
            weight = s.weight
        FROM unnest(v_jobs, v_ids, v_occurrences) AS u(id, schedule_id, occurrence)
        JOIN workhorse.schedules s ON s.id = u.schedule_id
        WHERE j.id = u.id;
    END IF;

    WITH fired AS (
        SELECT f.id, max(f.occurrence) AS latest
        FROM unnest(v_ids, v_occurrences) AS f(id, occurrence)
        GROUP BY f.id
    ), moved AS (
        UPDATE workhorse.schedules s
        SET next_run_at = GREATEST(s.next_run_at, u.next_run_at),
            last_run_at = GREATEST(s.last_run_at, fired.latest)
        FROM unnest(p_ids, p_next_run_ats) AS u(id, next_run_at)
        LEFT JOIN fired ON fired.id = u.id
        WHERE s.id = u.id
        RETURNING s.id
    )
    DELETE FROM workhorse.schedule_runs r
    USING fired
    WHERE r.schedule_id = fired.id AND r.occurrence < fired.latest - interval '1 hour';

    RETURN QUERY
    SELECT u.id, u.occurrence, u.job
    FROM unnest(v_ids, v_occurrences, v_jobs) AS u(id, occurrence, job);
END
$$;
