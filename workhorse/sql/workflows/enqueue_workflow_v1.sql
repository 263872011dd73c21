-- Insert a whole canvas (docs/design.md "Workflows") in one statement, in the caller's transaction.
-- Members are parallel arrays, as enqueue_v2's, plus `p_modes` (how parents' results reach
-- each: 'none', 'one', 'list'). Dependencies are parallel arrays too: the dependent's position
-- in the member arrays (1-based), and either the parent's position (`p_edge_parents`) or an
-- existing job's id (`p_edge_ids`, from depends_on), its position among the dependent's
-- parents, and whether the parent's result is passed.
--
-- Nothing is written when an existing id is unknown: the row comes back with a NULL workflow
-- id and the unknown ids in `missing`. Existing parents are locked FOR UPDATE in (queue, id)
-- order before anything is read of them, so a parent's completion either committed before
-- (its status is read: succeeded counts as done, failed or canceled cancels the member at
-- once) or waits for this transaction and then sees the dependency rows (its trigger
-- releases). Each queue's enqueue gate is taken in shared mode (sorted), each queue's level
-- raised to 2 (so that 0.2.0's claim admits nothing there), while the rows themselves stay
-- level 1, so that the completion functions of 0.2.0 (level 1, frozen) record their ends and
-- the trigger sees them; ready keyed members hinted, and the queues' claimers woken at commit.
--
-- `p_costs`, `p_rate_costs` and `p_weights` (NULL: 1 for every member) are each member's units,
-- as enqueue_v2's, and refused the same way (SQLSTATE WH005, nothing written) when a member's
-- cost can never fit its queue's synced policy; the on_error signature's units likewise.
-- `p_retentions` (JSON documents, NULL: kept for ever) is each member's task retention: it fixes
-- the expiry of a member the database ends itself (a cancel for a failed dependency, here or in
-- the trigger; a PayloadError at release), as the worker's outcome fixes the others'.
-- `p_tags` (NULL: none) is each member's tags and `p_on_error_tags` the on_error job's, JSON
-- arrays as enqueue_v2 takes them (the workflow's own tags already merged in by the caller).
CREATE FUNCTION workhorse.enqueue_workflow_v1(
    p_tasks text[],
    p_queues text[],
    p_ckeys text[],
    p_priorities smallint[],
    p_payloads text[],
    p_run_ats timestamptz[],
    p_delays double precision[],
    p_max_attempts integer[],
    p_on_failures text[],
    p_metas text[],
    p_modes text[],
    p_edge_jobs integer[],
    p_edge_parents integer[],
    p_edge_ids bigint[],
    p_edge_positions integer[],
    p_edge_passes boolean[],
    p_result_ords integer[],
    p_result_kind text,
    p_on_error_task text DEFAULT NULL,
    p_on_error_queue text DEFAULT NULL,
    p_on_error_ckey text DEFAULT NULL,
    p_on_error_priority smallint DEFAULT NULL,
    p_on_error_payload text DEFAULT NULL,
    p_on_error_max_attempts integer DEFAULT NULL,
    p_on_error_on_failure text DEFAULT NULL,
    p_costs integer[] DEFAULT NULL,
    p_rate_costs integer[] DEFAULT NULL,
    p_weights smallint[] DEFAULT NULL,
    p_retentions text[] DEFAULT NULL,
    p_on_error_cost integer DEFAULT 1,
    p_on_error_rate_cost integer DEFAULT 1,
    p_on_error_weight smallint DEFAULT 1,
    p_budgets text[] DEFAULT NULL,
    p_on_error_budget text DEFAULT NULL,
    p_tags text[] DEFAULT NULL,
    p_on_error_tags text DEFAULT NULL
) RETURNS TABLE (workflow_id bigint, ids bigint[], missing bigint[])
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_n integer := COALESCE(cardinality(p_tasks), 0);
    v_queue text;
    v_missing bigint[];
    v_cand bigint[];
    v_wf bigint;
    v_sequence regclass;
    v_failed record;
    v_row record;
    v_at timestamptz := clock_timestamp();
BEGIN
    -- Unknown (or pruned) existing parents: refused before anything is written.
    SELECT array_agg(DISTINCT e.id ORDER BY e.id) INTO v_missing
    FROM unnest(p_edge_ids) AS e(id)
    WHERE e.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM workhorse.jobs j WHERE j.id = e.id);
    IF v_missing IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, NULL::bigint[], v_missing;
        RETURN;
    END IF;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse._enqueue_gate_id_v1(v_queue));
    END LOOP;

    -- A cost that can never fit its queue's synced policy: refused before anything is written
    -- (enqueue_v2's rule and message). The on_error signature is checked as a member.
    IF p_costs IS NOT NULL OR p_rate_costs IS NOT NULL
       OR COALESCE(p_on_error_cost, 1) <> 1 OR COALESCE(p_on_error_rate_cost, 1) <> 1 THEN
        SELECT t.queue, t.cost, t.rate_cost, p.max_active, p.max_active_per_key, p.rate_limit,
               p.rate_limit_per_key
        INTO v_row
        FROM (SELECT u.queue, u.cost, u.rate_cost, u.ckey, u.ord
              FROM unnest(p_queues, p_costs, p_rate_costs, p_ckeys)
                   WITH ORDINALITY AS u(queue, cost, rate_cost, ckey, ord)
              UNION ALL
              SELECT p_on_error_queue, p_on_error_cost, p_on_error_rate_cost, p_on_error_ckey,
                     v_n + 1
              WHERE p_on_error_task IS NOT NULL) AS t
        JOIN workhorse.policies p ON p.queue = t.queue
        WHERE COALESCE(t.cost, 1) > COALESCE(p.max_active, 2147483647)
           OR (t.ckey IS NOT NULL
               AND COALESCE(t.cost, 1) > COALESCE(p.max_active_per_key, 2147483647))
           OR COALESCE(t.rate_cost, 1) > COALESCE(p.rate_limit, 2147483647)
           OR (t.ckey IS NOT NULL
               AND COALESCE(t.rate_cost, 1) > COALESCE(p.rate_limit_per_key, 2147483647))
        ORDER BY t.ord
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'a job of cost % and rate_cost % can never start on queue %: its '
                            'policy allows max_active=%, max_active_per_key=%, rate_limit N=%, '
                            'rate_limit_per_key N=%',
                COALESCE(v_row.cost, 1), COALESCE(v_row.rate_cost, 1), v_row.queue,
                v_row.max_active, v_row.max_active_per_key, v_row.rate_limit,
                v_row.rate_limit_per_key
                USING ERRCODE = 'WH005';
        END IF;
    END IF;

    -- Every member's queue at level 2; the on_error signature's too when its units are not 1
    -- (a claim of level 1 cannot count them).
    INSERT INTO workhorse.queue_levels AS lv (queue, feature_level)
    SELECT DISTINCT q, 2::smallint
    FROM (SELECT unnest(p_queues) AS q
          UNION ALL
          SELECT p_on_error_queue
          WHERE p_on_error_task IS NOT NULL
            AND (COALESCE(p_on_error_cost, 1) <> 1 OR COALESCE(p_on_error_rate_cost, 1) <> 1
                 OR p_on_error_budget IS NOT NULL))
         AS qs
    ORDER BY 1
    ON CONFLICT (queue) DO UPDATE SET feature_level = excluded.feature_level
        WHERE lv.feature_level < excluded.feature_level;
    -- The named budget of each member (NULL: none), recorded as enqueue_v2 records it.
    IF p_budgets IS NOT NULL OR p_on_error_budget IS NOT NULL THEN
        INSERT INTO workhorse.budget_queues (budget, queue)
        SELECT DISTINCT t.budget, t.queue
        FROM (SELECT * FROM unnest(p_budgets, p_queues) AS u(budget, queue)
              UNION ALL
              SELECT p_on_error_budget, p_on_error_queue WHERE p_on_error_task IS NOT NULL)
             AS t(budget, queue)
        WHERE t.budget IS NOT NULL
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;

    -- Existing parents, locked in (queue, id) order (see above), and marked so that the
    -- workflow trigger fires on their ends (a job outside any workflow has no trigger work).
    PERFORM 1 FROM workhorse.jobs j
    WHERE j.id IN (SELECT e.id FROM unnest(p_edge_ids) AS e(id) WHERE e.id IS NOT NULL)
    ORDER BY j.queue, j.id
    FOR UPDATE;
    UPDATE workhorse.jobs j SET has_dependents = true
    WHERE j.id IN (SELECT e.id FROM unnest(p_edge_ids) AS e(id) WHERE e.id IS NOT NULL)
      AND j.workflow_id IS NULL AND NOT j.has_dependents;

    v_sequence := pg_get_serial_sequence('workhorse.jobs', 'id')::regclass;
    v_cand := ARRAY(SELECT nextval(v_sequence) FROM generate_series(1, v_n) ORDER BY 1);
    INSERT INTO workhorse.workflows
        (result_ids, result_kind, on_error_task, on_error_queue, on_error_ckey,
         on_error_priority, on_error_payload, on_error_max_attempts, on_error_on_failure,
         on_error_cost, on_error_rate_cost, on_error_weight, on_error_budget, on_error_tags)
    VALUES (ARRAY(SELECT v_cand[o] FROM unnest(p_result_ords) WITH ORDINALITY AS r(o, n)
                  ORDER BY r.n),
            p_result_kind, p_on_error_task, p_on_error_queue, p_on_error_ckey,
            p_on_error_priority, p_on_error_payload::jsonb, p_on_error_max_attempts,
            p_on_error_on_failure, COALESCE(p_on_error_cost, 1),
            COALESCE(p_on_error_rate_cost, 1), COALESCE(p_on_error_weight, 1),
            CASE WHEN p_on_error_task IS NOT NULL THEN p_on_error_budget END,
            CASE WHEN p_on_error_task IS NOT NULL AND p_on_error_tags IS NOT NULL
                 THEN ARRAY(SELECT jsonb_array_elements_text(p_on_error_tags::jsonb)) END)
    RETURNING id INTO v_wf;

    WITH edges AS (
        SELECT e.job, e.parent, e.id
        FROM unnest(p_edge_jobs, p_edge_parents, p_edge_ids) AS e(job, parent, id)
    ), pending AS (
        SELECT e.job, count(*) AS n
        FROM edges e
        LEFT JOIN workhorse.jobs p ON p.id = e.id
        WHERE e.parent IS NOT NULL OR p.status IS DISTINCT FROM 'succeeded'
        GROUP BY e.job
    ), input AS (
        SELECT t.*, COALESCE(pd.n, 0) AS pending,
               COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
        FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats,
                    p_delays, p_max_attempts, p_on_failures, p_metas, p_modes, p_costs,
                    p_rate_costs, p_weights, p_retentions, p_budgets, p_tags)
             WITH ORDINALITY
             AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts,
                  on_failure, meta, mode, cost, rate_cost, weight, retention, budget, tags, ord)
        LEFT JOIN pending pd ON pd.job = t.ord
    ), members AS (
        INSERT INTO workhorse.workflow_members
            (job_id, workflow_id, pending, mode, delay, run_at, retention)
        SELECT v_cand[i.ord], v_wf, i.pending, i.mode, i.delay, i.run_at,
               COALESCE(i.retention, '{}')::jsonb
        FROM input i
    ), inserted AS (
        INSERT INTO workhorse.jobs
            (id, task, queue, ckey, priority, payload, status, max_attempts, on_failure,
             run_at, meta, feature_level, workflow_id, cost, rate_cost, weight, budget, tags)
        OVERRIDING SYSTEM VALUE
        SELECT v_cand[i.ord], i.task, i.queue, COALESCE(i.ckey, ''), i.priority,
               i.payload::jsonb,
               CASE WHEN i.pending > 0 THEN 'waiting'
                    WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
               i.max_attempts, i.on_failure, i.due, COALESCE(i.meta, '{}')::jsonb, 1, v_wf,
               COALESCE(i.cost, 1), COALESCE(i.rate_cost, 1), COALESCE(i.weight, 1), i.budget,
               CASE WHEN i.tags IS NOT NULL
                    THEN ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END
        FROM input i
        ORDER BY i.ord
        RETURNING id, queue, ckey, status, tags
    ), tagged AS (
        INSERT INTO workhorse.job_tags (tag, job_id)
        SELECT x.tag, ins.id FROM inserted ins CROSS JOIN LATERAL unnest(ins.tags) AS x(tag)
        WHERE ins.tags IS NOT NULL
    ), hinted AS (
        INSERT INTO workhorse.key_hints (queue, ckey)
        SELECT DISTINCT i.queue, i.ckey FROM inserted i
        WHERE i.ckey <> '' AND i.status = 'ready' AND workhorse._keyed_v2(i.queue)
    )
    INSERT INTO workhorse.job_deps (job_id, parent_id, position, passes)
    SELECT v_cand[e.job], COALESCE(v_cand[e.parent], e.id), e.position, e.passes
    FROM unnest(p_edge_jobs, p_edge_parents, p_edge_ids, p_edge_positions, p_edge_passes)
         AS e(job, parent, id, position, passes);

    -- A member with an existing parent that already failed or was canceled: canceled at once
    -- (its own dependents through the trigger).
    FOR v_failed IN
        SELECT DISTINCT ON (e.job) e.job, p.id, p.task, p.status
        FROM unnest(p_edge_jobs, p_edge_ids) AS e(job, id)
        JOIN workhorse.jobs p ON p.id = e.id
        WHERE p.status IN ('failed', 'canceled', 'expired')
        ORDER BY e.job, p.id
    LOOP
        UPDATE workhorse.jobs j
        SET status = 'canceled', finished_at = v_at,
            expires_at = workhorse._expiry_v1(
                'canceled', COALESCE(p_retentions[v_failed.job], '{}')::jsonb, v_at),
            error = jsonb_build_object(
                'type', 'DependencyFailedError',
                'message', format('job %s (%s), which it depends on, ended %s',
                                  v_failed.id, v_failed.task, v_failed.status),
                'traceback', NULL, 'dependency', v_failed.id)
        WHERE j.id = v_cand[v_failed.job] AND j.status = 'waiting';
    END LOOP;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q LOOP
        PERFORM workhorse._wake_v1(v_queue);
    END LOOP;
    RETURN QUERY SELECT v_wf, v_cand, NULL::bigint[];
END
$$;
