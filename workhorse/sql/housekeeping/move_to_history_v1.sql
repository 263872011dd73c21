-- Moves up to `p_limit` jobs that ended `succeeded` or `expired` at least `p_after` seconds ago
-- from `jobs` to `job_history` (docs/design.md "History"), oldest first, with the partitions of
-- their days made first; their rows in job_tags move to job_history_tags, in the same day.
-- Under the pruner's try-lock (prune_jobs_v2), so that the mover, which makes partitions, and
-- the pruner, which drops them, never run at once. Returns how many moved, or -1 (another
-- mover or pruner holds the lock).
--
-- No row lock is needed: no statement but the pruner (under the same lock) changes a succeeded
-- or expired job outside a workflow, and the DELETE checks its conditions again on each row.
CREATE FUNCTION workhorse.move_to_history_v1(p_limit integer, p_after double precision)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
    v_day date;
    v_moved integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(2003, 7048) THEN
        RETURN -1;
    END IF;
    v_ids := ARRAY(
        SELECT j.id FROM workhorse.jobs j
        WHERE j.status IN ('succeeded', 'expired') AND j.workflow_id IS NULL
          AND NOT j.has_dependents AND j.idempotency_key IS NULL AND j.unique_key IS NULL
          AND j.job_key IS NULL AND NOT j.durable
          AND j.finished_at <= now() - make_interval(secs => p_after)
        ORDER BY j.finished_at
        LIMIT p_limit);
    IF cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_day IN
        SELECT DISTINCT (j.finished_at AT TIME ZONE 'UTC')::date
        FROM workhorse.jobs j WHERE j.id = ANY(v_ids)
    LOOP
        PERFORM workhorse._history_partition_v1(v_day);
    END LOOP;
    WITH gone AS (
        DELETE FROM workhorse.jobs j
        WHERE j.id = ANY(v_ids)
          AND j.status IN ('succeeded', 'expired') AND j.workflow_id IS NULL
          AND NOT j.has_dependents AND j.idempotency_key IS NULL AND j.unique_key IS NULL
          AND j.job_key IS NULL AND NOT j.durable
        RETURNING j.*
    ), kept AS (
        INSERT INTO workhorse.job_history SELECT * FROM gone
    ), tagged AS (
        SELECT x.tag, g.id, g.finished_at
        FROM gone g CROSS JOIN LATERAL unnest(g.tags) AS x(tag)
    ), tags AS (
        DELETE FROM workhorse.job_tags t USING tagged d WHERE t.tag = d.tag AND t.job_id = d.id
    ), history_tags AS (
        INSERT INTO workhorse.job_history_tags (tag, job_id, finished_at)
        SELECT d.tag, d.id, d.finished_at FROM tagged d
    )
    SELECT count(*) INTO v_moved FROM gone;
    RETURN v_moved;
END
$$;
