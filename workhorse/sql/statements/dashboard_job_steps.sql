-- A job's steps for its dashboard page (docs/design.md "Durable execution"): the first
-- %(limit)s in the order it reached them, through job_steps' primary key (job_id, name), each
-- result and error cut to %(width)s characters of its JSON text with that text's length, so a
-- job with many large results reads no more than the page shows.
SELECT s.name, s.kind, s.created_at, s.recorded_at, s.wake_at, s.signal,
       left(s.result::text, %(width)s) AS result, length(s.result::text) AS result_length,
       s.error ->> 'type' AS error_type, left(s.error ->> 'message', %(width)s) AS error_message
FROM workhorse.job_steps s
WHERE s.job_id = %(id)s
ORDER BY s.created_at, s.name
LIMIT %(limit)s
