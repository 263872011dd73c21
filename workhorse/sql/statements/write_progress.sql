-- Write the latest progress of running jobs, under each job's fence: only while the job is
-- active under that fence with its lease unexpired (a stale handler, whose lease ran out or whose
-- job was claimed again, writes nothing), and never a value older than the stored one of the same
-- attempt (`seq`). `done` and `total` come as the text of JSON numbers. One row per job in the
-- batch; returns the ids written.
-- `status IN ('active', '')`: see fail_v2.sql (the planner then reads the jobs by id).
UPDATE workhorse.jobs j
SET progress = jsonb_build_object('done', b.done::numeric, 'total', b.total::numeric,
                                  'message', b.message, 'fence', b.fence, 'seq', b.seq),
    progress_at = clock_timestamp()
FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[])
    AS b(id, fence, seq, done, total, message)
WHERE j.id = b.id AND j.fence = b.fence AND j.status IN ('active', '')
  AND j.lease_until > clock_timestamp()
  AND (j.progress IS NULL OR (j.progress ->> 'fence')::bigint IS DISTINCT FROM b.fence
       OR (j.progress ->> 'seq')::bigint < b.seq)
RETURNING j.id
