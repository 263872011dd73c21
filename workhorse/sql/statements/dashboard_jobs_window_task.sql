-- dashboard_jobs_window.sql for a task substring: the id and status of the newest matches in
-- [lo, hi), at most %(cap)s: the same rows, without reading the window row by row.
-- Succeeded matches are those of the names in %(tasks)s (the succeeded task names that
-- contain the substring: dashboard_succeeded_tasks.sql), each name's read by (task, id) in
-- jobs_succeeded_task_idx (ordered by `id + 0`, so that no LIMIT tempts the planner into
-- walking the primary key through the window with the name as a filter). Every other status
-- reads its own
-- partial index (named beside each branch) with the substring as a filter, bounded by that
-- status's jobs as in dashboard_jobs_older.sql; their window bounds are written `id + 0`, so
-- that no branch walks the primary key through the window (what reading the window row by row
-- cost: lower() of every row). The queue filter is the list of known queue names that contain
-- the substring (dashboard_known_queues.sql); key and status match exactly; NULL means any.
SELECT f.id, f.status
FROM (
    (SELECT s.id, 'succeeded'::text AS status
     FROM unnest(%(tasks)s::text[]) AS t(task)
     CROSS JOIN LATERAL (
         SELECT j.id FROM workhorse.jobs j  -- jobs_succeeded_task_idx
         WHERE (%(status)s::text IS NULL OR %(status)s::text = 'succeeded')
           AND j.status = 'succeeded' AND j.task = t.task
           AND j.id >= %(lo)s AND j.id < %(hi)s
           AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]))
           AND (%(key)s::text IS NULL OR j.ckey = %(key)s::text)
         ORDER BY j.id + 0 DESC
         LIMIT %(cap)s) AS s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_waiting_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'waiting') AND status = 'waiting'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_scheduled_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'scheduled') AND status = 'scheduled'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_ready_idx or jobs_ready_key_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'ready') AND status = 'ready'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_active_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'active') AND status = 'active'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'held') AND status = 'held'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'failed') AND status = 'failed'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
    UNION ALL
    (SELECT id, status FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'canceled') AND status = 'canceled'
       AND id + 0 >= %(lo)s AND id + 0 < %(hi)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND strpos(lower(task), lower(%(task)s::text)) > 0
     ORDER BY id + 0 DESC
     LIMIT %(cap)s)
) AS f
ORDER BY f.id DESC
LIMIT %(cap)s
