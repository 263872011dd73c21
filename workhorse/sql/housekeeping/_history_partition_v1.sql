-- The partitions of job_history and job_history_tags for one UTC day, made if missing
-- (docs/design.md "History").
-- Created apart and then attached: ATTACH PARTITION takes only a SHARE UPDATE EXCLUSIVE lock on
-- job_history, so readers and the mover's inserts go on, where CREATE TABLE ... PARTITION OF
-- would lock them out. The partitioned indexes are built on attach, on an empty table. Called
-- by move_to_history_v1 under the pruner's try-lock, so two makers never race.
CREATE FUNCTION workhorse._history_partition_v1(p_day date)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_suffix text := '_p' || to_char(p_day, 'YYYYMMDD');
    v_parent text;
BEGIN
    FOREACH v_parent IN ARRAY ARRAY['job_history', 'job_history_tags'] LOOP
        IF to_regclass(format('workhorse.%I', v_parent || v_suffix)) IS NULL THEN
            EXECUTE format('CREATE TABLE workhorse.%I (LIKE workhorse.%I)',
                           v_parent || v_suffix, v_parent);
            EXECUTE format(
                'ALTER TABLE workhorse.%I ATTACH PARTITION workhorse.%I'
                ' FOR VALUES FROM (%L) TO (%L)',
                v_parent, v_parent || v_suffix, p_day::timestamp AT TIME ZONE 'UTC',
                (p_day + 1)::timestamp AT TIME ZONE 'UTC');
        END IF;
    END LOOP;
END
$$;
