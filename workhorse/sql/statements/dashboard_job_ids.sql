-- The ids of the jobs a bulk action on "everything matching" acts on: the matches of the
-- dashboard's job search in %(statuses)s (the statuses the action applies to, each with its own
-- partial index; no action applies to succeeded jobs), newest first, at most %(limit)s. Filters
-- as in dashboard_jobs_older.sql.
WITH found AS (
    (SELECT id FROM workhorse.jobs  -- jobs_scheduled_idx
     WHERE 'scheduled' = ANY(%(statuses)s::text[]) AND status = 'scheduled'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_ready_idx or jobs_ready_key_idx
     WHERE 'ready' = ANY(%(statuses)s::text[]) AND status = 'ready'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_active_idx
     WHERE 'active' = ANY(%(statuses)s::text[]) AND status = 'active'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE 'held' = ANY(%(statuses)s::text[]) AND status = 'held'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE 'failed' = ANY(%(statuses)s::text[]) AND status = 'failed'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id FROM workhorse.jobs  -- jobs_held_failed_idx
     WHERE 'canceled' = ANY(%(statuses)s::text[]) AND status = 'canceled'
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
       AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
       AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
     ORDER BY id + 0 DESC
     LIMIT %(limit)s)
)
SELECT id FROM found ORDER BY id DESC LIMIT %(limit)s
