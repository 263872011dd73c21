-- Desired-state sync of one namespace's schedules. Returns one row per schedule touched: created,
-- updated, unchanged or pruned. `p_next_run_ats` is each schedule's first occurrence after now,
-- computed by the caller (cron needs a cron library); it is used for a new schedule and for one
-- whose expression (cron, interval or zone) changed, which so takes effect from its next
-- occurrence. Any other change keeps the schedule's place.
--
-- `p_costs`, `p_rate_costs` and `p_weights` (NULL: 1 for every schedule) are the cost, rate cost
-- and weight of every job the schedule fires (docs/design.md "Fair share and job cost"; the app
-- resolves a task's cost callables with the schedule's arguments when the schedule is declared,
-- so the stored row says what every supervisor fires, whatever its code). A schedule whose cost
-- exceeds its queue's synced max_active or max_active_per_key (the latter with a concurrency
-- key), or whose rate cost exceeds a synced rate limit's N, could never start a job: the sync
-- refuses it (SQLSTATE WH005, as enqueue_v2 refuses such a job), before anything is written.
-- `p_tags` (NULL: none) is the tags of every job the schedule fires, a JSON array each.
CREATE FUNCTION workhorse.sync_schedules_v2(
    p_namespace text,
    p_names text[],
    p_tasks text[],
    p_crons text[],
    p_everys interval[],
    p_tzs text[],
    p_args text[],
    p_kwargs text[],
    p_queues text[],
    p_ckeys text[],
    p_priorities smallint[],
    p_max_attempts integer[],
    p_on_failures text[],
    p_catch_ups text[],
    p_next_run_ats timestamptz[],
    p_prune boolean,
    p_costs integer[] DEFAULT NULL,
    p_rate_costs integer[] DEFAULT NULL,
    p_weights smallint[] DEFAULT NULL,
    p_tags text[] DEFAULT NULL
) RETURNS TABLE (sync_action text, sync_name text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text;
    v_owner text;
    v_row record;
BEGIN
    -- Syncs of schedules are rare: one at a time, so that two namespaces racing for a new name
    -- serialize and the second sees the first's row ("wksched").
    PERFORM pg_advisory_xact_lock(33613665561765220);

    SELECT s.name, s.namespace INTO v_name, v_owner
    FROM workhorse.schedules s
    WHERE s.name IN (SELECT unnest(p_names)) AND s.namespace <> p_namespace
    ORDER BY s.name
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'schedule % is owned by namespace %, not %', v_name, v_owner, p_namespace
            USING ERRCODE = 'WH006';
    END IF;

    SELECT t.name, t.queue, COALESCE(t.cost, 1) AS cost, COALESCE(t.rate_cost, 1) AS rate_cost,
           p.max_active, p.max_active_per_key, p.rate_limit, p.rate_limit_per_key
    INTO v_row
    FROM unnest(p_names, p_queues, p_ckeys, p_costs, p_rate_costs)
         WITH ORDINALITY AS t(name, queue, ckey, cost, rate_cost, ord)
    JOIN workhorse.policies p ON p.queue = t.queue
    WHERE COALESCE(t.cost, 1) > COALESCE(p.max_active, 2147483647)
       OR (t.ckey IS NOT NULL AND COALESCE(t.cost, 1) > COALESCE(p.max_active_per_key, 2147483647))
       OR COALESCE(t.rate_cost, 1) > COALESCE(p.rate_limit, 2147483647)
       OR (t.ckey IS NOT NULL
           AND COALESCE(t.rate_cost, 1) > COALESCE(p.rate_limit_per_key, 2147483647))
    ORDER BY t.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'schedule %: a job of cost % and rate_cost % can never start on queue %: '
                        'its policy allows max_active=%, max_active_per_key=%, rate_limit N=%, '
                        'rate_limit_per_key N=%',
            v_row.name, v_row.cost, v_row.rate_cost, v_row.queue, v_row.max_active,
            v_row.max_active_per_key, v_row.rate_limit, v_row.rate_limit_per_key
            USING ERRCODE = 'WH005';
    END IF;

    -- One upsert for the whole set: a row whose definition is unchanged is locked, not written.
    RETURN QUERY
    WITH input AS (
        SELECT *
        FROM unnest(p_names, p_tasks, p_crons, p_everys, p_tzs, p_args, p_kwargs, p_queues,
                    p_ckeys, p_priorities, p_max_attempts, p_on_failures, p_catch_ups,
                    p_next_run_ats, p_costs, p_rate_costs, p_weights, p_tags)
            AS t(name, task, cron, every, tz, args, kwargs, queue, ckey, priority,
                 max_attempts, on_failure, catch_up, next_run_at, cost, rate_cost, weight,
                 tags)
    ), upserted AS (
        INSERT INTO workhorse.schedules AS s
            (name, namespace, task, cron, every_interval, tz, args, kwargs, queue, ckey,
             priority, max_attempts, on_failure, catch_up, next_run_at, cost, rate_cost,
             weight, tags)
        SELECT i.name, p_namespace, i.task, i.cron, i.every, i.tz, i.args::jsonb,
               i.kwargs::jsonb, i.queue, i.ckey, i.priority, i.max_attempts, i.on_failure,
               i.catch_up, i.next_run_at, COALESCE(i.cost, 1), COALESCE(i.rate_cost, 1),
               COALESCE(i.weight, 1),
               CASE WHEN i.tags IS NOT NULL
                    THEN ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END
        FROM input i
        ORDER BY i.name
        ON CONFLICT (name) DO UPDATE
        SET task = EXCLUDED.task, cron = EXCLUDED.cron, every_interval = EXCLUDED.every_interval,
            tz = EXCLUDED.tz, args = EXCLUDED.args, kwargs = EXCLUDED.kwargs,
            queue = EXCLUDED.queue, ckey = EXCLUDED.ckey, priority = EXCLUDED.priority,
            max_attempts = EXCLUDED.max_attempts, on_failure = EXCLUDED.on_failure,
            catch_up = EXCLUDED.catch_up, cost = EXCLUDED.cost,
            rate_cost = EXCLUDED.rate_cost, weight = EXCLUDED.weight, tags = EXCLUDED.tags,
            updated_at = now(),
            -- Only a new expression moves the schedule: to its first occurrence after now.
            next_run_at = CASE
                WHEN (s.cron, s.every_interval, s.tz)
                     IS NOT DISTINCT FROM (EXCLUDED.cron, EXCLUDED.every_interval, EXCLUDED.tz)
                THEN s.next_run_at ELSE EXCLUDED.next_run_at END
        WHERE (s.task, s.cron, s.every_interval, s.tz, s.args, s.kwargs, s.queue, s.ckey,
               s.priority, s.max_attempts, s.on_failure, s.catch_up, s.cost, s.rate_cost,
               s.weight, s.tags)
              IS DISTINCT FROM
              (EXCLUDED.task, EXCLUDED.cron, EXCLUDED.every_interval, EXCLUDED.tz,
               EXCLUDED.args, EXCLUDED.kwargs, EXCLUDED.queue, EXCLUDED.ckey, EXCLUDED.priority,
               EXCLUDED.max_attempts, EXCLUDED.on_failure, EXCLUDED.catch_up, EXCLUDED.cost,
               EXCLUDED.rate_cost, EXCLUDED.weight, EXCLUDED.tags)
        RETURNING s.name, (s.xmax = 0) AS inserted
    )
    SELECT CASE WHEN u.inserted THEN 'created' WHEN u.name IS NOT NULL THEN 'updated'
                ELSE 'unchanged' END,
           i.name
    FROM input i
    LEFT JOIN upserted u ON u.name = i.name
    ORDER BY i.name;

    IF p_prune THEN
        -- Waits for a firing pass that holds the row; after this commits, none fires it again.
        RETURN QUERY
        WITH gone AS (
            DELETE FROM workhorse.schedules s
            WHERE s.namespace = p_namespace
              AND NOT EXISTS (SELECT 1 FROM unnest(p_names) AS n(name) WHERE n.name = s.name)
            RETURNING s.id, s.name
        ), forgotten AS (
            DELETE FROM workhorse.schedule_runs r USING gone WHERE r.schedule_id = gone.id
        )
        SELECT 'pruned'::text, g.name FROM gone g ORDER BY g.name;
    END IF;
END
$$;
