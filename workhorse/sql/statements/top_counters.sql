-- Cheap running totals for `workhorse top`: claims from the fence sequence (every claim takes one
-- fence), completions and failures from the counters live workers publish. No history scan.
SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM workhorse.fence_seq) AS claimed,
       COALESCE(sum((stats->>'succeeded')::bigint), 0) AS succeeded,
       COALESCE(sum((stats->>'failed')::bigint), 0) AS failed
FROM workhorse.workers
