-- list_jobs.sql for the jobs of one tag: a backward walk of job_tags' primary key, the newest
-- first (a tag on a million jobs lists its newest in a few probes), each job read by its own
-- key. Lookup rows whose job was pruned by an older release join away. The walk is fenced
-- (OFFSET 0) so that it drives the join: with another filter, the planner may otherwise walk
-- jobs_pkey from the newest job down, and read every newer job of the table that lacks the tag;
-- this way a list costs at most the tag's own entries.
--
-- Jobs moved to history (docs/design.md "History") are found the same way in job_history_tags,
-- each day's (tag, job_id) walked backwards and merged, each job read in its own day (its
-- finished_at prunes the other days), LATERAL with LIMIT 1 (a subquery with a LIMIT is not
-- flattened into a join: flattened, the planner hashed every job of history, 216 ms for a tag
-- of 200,000 moved jobs in one queue, against 3 ms); the two lists are merged by id.
SELECT * FROM (
    (SELECT j.id, j.task, j.queue, NULLIF(j.ckey, '') AS concurrency_key, j.priority,
            j.payload, j.status, j.attempts, j.max_attempts, j.result, j.error, j.run_at,
            j.enqueued_at, j.started_at, j.finished_at, j.on_failure, j.fence, j.lease_until,
            j.meta, j.cancel_requested_at IS NOT NULL AS cancel_requested, j.idempotency_key,
            j.expires_at, j.job_key, j.cost, j.rate_cost, j.weight,
            CASE WHEN (j.progress ->> 'fence')::bigint = j.fence THEN j.progress END
                AS progress,
            j.progress_at, j.workflow_id,
            CASE WHEN j.workflow_id IS NULL THEN '{}'::bigint[]
                 ELSE ARRAY(SELECT d.parent_id FROM workhorse.job_deps d
                            WHERE d.job_id = j.id ORDER BY d.position, d.parent_id)
                 END AS depends_on,
            j.budget, j.tags, j.redriven_at, j.redrive_count, j.deadline, j.start_by
     FROM (SELECT t.job_id FROM workhorse.job_tags t WHERE t.tag = %(tag)s::text
           ORDER BY t.job_id DESC OFFSET 0) AS t
     JOIN workhorse.jobs j ON j.id = t.job_id
     WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
       AND (%(status)s::text IS NULL OR j.status = %(status)s::text)
       AND (%(key)s::text IS NULL OR j.ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
     ORDER BY t.job_id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT h.*
     FROM (SELECT t.job_id, t.finished_at FROM workhorse.job_history_tags t
           WHERE t.tag = %(tag)s::text
             -- History holds only these statuses: another's filter never walks it.
             AND (%(status)s::text IS NULL OR %(status)s::text IN ('succeeded', 'expired'))
           ORDER BY t.job_id DESC OFFSET 0) AS t
     CROSS JOIN LATERAL (
         -- Moved jobs are never workflow members: no dependencies to read.
         SELECT h.id, h.task, h.queue, NULLIF(h.ckey, ''), h.priority, h.payload, h.status,
                h.attempts, h.max_attempts, h.result, h.error, h.run_at, h.enqueued_at,
                h.started_at, h.finished_at, h.on_failure, h.fence, h.lease_until, h.meta,
                h.cancel_requested_at IS NOT NULL, h.idempotency_key, h.expires_at, h.job_key,
                h.cost, h.rate_cost, h.weight,
                CASE WHEN (h.progress ->> 'fence')::bigint = h.fence THEN h.progress END,
                h.progress_at, h.workflow_id, '{}'::bigint[],
                h.budget, h.tags, h.redriven_at, h.redrive_count, h.deadline, h.start_by
         FROM workhorse.job_history h
         WHERE h.id = t.job_id AND h.finished_at = t.finished_at
           AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
           AND (%(status)s::text IS NULL OR h.status = %(status)s::text)
           AND (%(key)s::text IS NULL OR h.ckey = %(key)s::text)
           AND (%(task)s::text IS NULL OR h.task = %(task)s::text)
         LIMIT 1) AS h
     ORDER BY t.job_id DESC
     LIMIT %(limit)s)
) AS tagged
ORDER BY id DESC
LIMIT %(limit)s
