-- The partition of job_history for one UTC day, made if missing (docs/design.md "History").
-- Created apart and then attached: ATTACH PARTITION takes only a SHARE UPDATE EXCLUSIVE lock on
-- job_history, so readers and the mover's inserts go on, where CREATE TABLE ... PARTITION OF
-- would lock them out. The partitioned indexes are built on attach, on an empty table. Called
-- by move_to_history_v1 under the pruner's try-lock, so two makers never race.
CREATE FUNCTION workhorse._history_partition_v1(p_day date)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text := 'job_history_p' || to_char(p_day, 'YYYYMMDD');
BEGIN
    IF to_regclass(format('workhorse.%I', v_name)) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE workhorse.%I (LIKE workhorse.job_history)', v_name);
    EXECUTE format(
        'ALTER TABLE workhorse.job_history ATTACH PARTITION workhorse.%I'
        ' FOR VALUES FROM (%L) TO (%L)',
        v_name, p_day::timestamp AT TIME ZONE 'UTC', (p_day + 1)::timestamp AT TIME ZONE 'UTC');
END
$$;
