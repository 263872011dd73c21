-- How many jobs match the dashboard's job search, by status, each count stopped at %(cap)s: the
-- succeeded ones within the window of ids [lo, hi) (what the search reads of them), every other
-- status over the whole table through its partial index (named beside each branch), with the
-- queue filter as the list of matching known queues (see dashboard_jobs_older.sql).
SELECT 'succeeded' AS status, count(*) AS n FROM (  -- the primary key, within the window
    SELECT 1 FROM workhorse.jobs
    WHERE id >= %(lo)s AND id < %(hi)s
      AND (%(status)s::text IS NULL OR %(status)s::text = 'succeeded') AND status = 'succeeded'
      AND (%(queue)s::text IS NULL OR strpos(lower(queue), lower(%(queue)s::text)) > 0)
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'scheduled', count(*) FROM (  -- jobs_scheduled_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'scheduled') AND status = 'scheduled'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'ready', count(*) FROM (  -- jobs_ready_idx or jobs_ready_key_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'ready') AND status = 'ready'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'active', count(*) FROM (  -- jobs_active_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'active') AND status = 'active'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'held', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'held') AND status = 'held'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'failed', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'failed') AND status = 'failed'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
UNION ALL
SELECT 'canceled', count(*) FROM (  -- jobs_held_failed_idx
    SELECT 1 FROM workhorse.jobs
    WHERE (%(status)s::text IS NULL OR %(status)s::text = 'canceled') AND status = 'canceled'
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(key)s::text IS NULL OR ckey = %(key)s::text)
      AND (%(task)s::text IS NULL OR strpos(lower(task), lower(%(task)s::text)) > 0)
    LIMIT %(cap)s) AS n
