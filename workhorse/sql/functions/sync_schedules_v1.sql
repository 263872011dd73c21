-- Desired-state sync of one namespace's schedules. Returns one row per schedule touched: created,
-- updated, unchanged or pruned. `p_next_run_ats` is each schedule's first occurrence after now,
-- computed by the caller (cron needs a cron library); it is used for a new schedule and for one
-- whose expression (cron, interval or zone) changed, which so takes effect from its next
-- occurrence. Any other change keeps the schedule's place.
CREATE FUNCTION workhorse.sync_schedules_v1(
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
    p_prune boolean
) RETURNS TABLE (sync_action text, sync_name text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text;
    v_owner text;
    v_old workhorse.schedules;
    v_new record;
BEGIN
    -- Syncs of schedules are rare: one at a time, so that two namespaces racing for a new name
    -- serialize and the second sees the first's row ("wksched").
    PERFORM pg_advisory_xact_lock(33613665561765220);

    SELECT s.name, s.namespace INTO v_name, v_owner
    FROM workhorse.schedules s
    WHERE s.name = ANY(p_names) AND s.namespace <> p_namespace
    ORDER BY s.name
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'schedule % is owned by namespace %, not %', v_name, v_owner, p_namespace
            USING ERRCODE = 'WH006';
    END IF;

    FOR v_new IN
        SELECT * FROM unnest(p_names, p_tasks, p_crons, p_everys, p_tzs, p_args, p_kwargs,
                             p_queues, p_ckeys, p_priorities, p_max_attempts, p_on_failures,
                             p_catch_ups, p_next_run_ats)
            AS t(name, task, cron, every, tz, args, kwargs, queue, ckey, priority, max_attempts,
                 on_failure, catch_up, next_run_at)
        ORDER BY 1
    LOOP
        SELECT * INTO v_old FROM workhorse.schedules s WHERE s.name = v_new.name FOR UPDATE;
        IF v_old.id IS NULL THEN
            INSERT INTO workhorse.schedules
                (name, namespace, task, cron, every_interval, tz, args, kwargs, queue, ckey,
                 priority, max_attempts, on_failure, catch_up, next_run_at)
            VALUES (v_new.name, p_namespace, v_new.task, v_new.cron, v_new.every, v_new.tz,
                    v_new.args::jsonb, v_new.kwargs::jsonb, v_new.queue, v_new.ckey,
                    v_new.priority, v_new.max_attempts, v_new.on_failure, v_new.catch_up,
                    v_new.next_run_at);
            sync_action := 'created';
        ELSIF (v_old.task, v_old.cron, v_old.every_interval, v_old.tz, v_old.args, v_old.kwargs,
               v_old.queue, v_old.ckey, v_old.priority, v_old.max_attempts, v_old.on_failure,
               v_old.catch_up)
              IS NOT DISTINCT FROM
              (v_new.task, v_new.cron, v_new.every, v_new.tz, v_new.args::jsonb,
               v_new.kwargs::jsonb, v_new.queue, v_new.ckey, v_new.priority, v_new.max_attempts,
               v_new.on_failure, v_new.catch_up)
        THEN
            sync_action := 'unchanged';
        ELSE
            UPDATE workhorse.schedules s
            SET task = v_new.task, cron = v_new.cron, every_interval = v_new.every,
                tz = v_new.tz, args = v_new.args::jsonb, kwargs = v_new.kwargs::jsonb,
                queue = v_new.queue, ckey = v_new.ckey, priority = v_new.priority,
                max_attempts = v_new.max_attempts, on_failure = v_new.on_failure,
                catch_up = v_new.catch_up, updated_at = now(),
                next_run_at = CASE
                    WHEN (v_old.cron, v_old.every_interval, v_old.tz)
                         IS NOT DISTINCT FROM (v_new.cron, v_new.every, v_new.tz)
                    THEN s.next_run_at ELSE v_new.next_run_at END
            WHERE s.id = v_old.id;
            sync_action := 'updated';
        END IF;
        sync_name := v_new.name;
        RETURN NEXT;
    END LOOP;

    IF p_prune THEN
        -- Waits for a firing pass that holds the row; after this commits, none fires it again.
        FOR v_old IN
            DELETE FROM workhorse.schedules s
            WHERE s.namespace = p_namespace AND NOT (s.name = ANY(p_names))
            RETURNING s.*
        LOOP
            DELETE FROM workhorse.schedule_runs r WHERE r.schedule_id = v_old.id;
            v_name := v_old.name;
            sync_action := 'pruned';
            sync_name := v_name;
            RETURN NEXT;
        END LOOP;
    END IF;
END
$$;
