-- The steps and signals of jobs about to be pruned go with them (docs/design.md "Durable
-- execution": retention). Jobs that recorded none cost one probe of each primary key.
CREATE FUNCTION workhorse._prune_durable_v1(p_ids bigint[]) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM workhorse.job_steps s WHERE s.job_id = ANY(p_ids);
    DELETE FROM workhorse.job_signals g WHERE g.job_id = ANY(p_ids);
$$;
