-- How many jobs older than the search window (id < lo) match the dashboard's job search, by
-- status, each count stopped at %(cap)s: every status but succeeded (whose history is read
-- within the window only: dashboard_jobs_window.sql counts those), each through its partial
-- index (named beside each branch), with the queue filter as the list of matching known queues
-- (see dashboard_jobs_older.sql).
SELECT 'scheduled', count(*) FROM (  -- jobs_scheduled_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'scheduled') AND status = 'scheduled'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'ready', count(*) FROM (  -- jobs_ready_idx or jobs_ready_key_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'ready') AND status = 'ready'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'active', count(*) FROM (  -- jobs_active_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'active') AND status = 'active'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'held', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'held') AND status = 'held'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'failed', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'failed') AND status = 'failed'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'canceled', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'canceled') AND status = 'canceled'
      AND id < %(lo)s
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
